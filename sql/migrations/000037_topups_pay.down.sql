DROP FUNCTION IF EXISTS topups_pay(text[], text[], text[], text[], text[], bigint[], text[]);
