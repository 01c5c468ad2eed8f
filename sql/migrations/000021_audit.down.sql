ALTER TABLE stripe_events DROP CONSTRAINT stripe_events_reviewed_by_check;
ALTER TABLE stripe_events DROP COLUMN reviewed_by;
DROP TABLE audit_log;
DROP FUNCTION audit_log_refuse_change();
