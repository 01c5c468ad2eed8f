DROP FUNCTION IF EXISTS stripe_events_insert_group(text[], text[], text[], boolean[], timestamptz[], jsonb[], text[], text[]);
