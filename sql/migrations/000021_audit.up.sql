-- The audit trail: who did what through the API and the console, and what they were refused. One row per
-- mutating request, per refused request (401, 403) and per console action, with the key's name (the name
-- in ONCELEDGER_API_KEYS; empty when no key was recognised), the route, the ids it named (account_id,
-- target_id) and its outcome.
-- Rows are never changed or deleted (audit_log_append_only), so the trail cannot be rewritten by the
-- service's own role either.
--
-- account_id is the account the request named, or '' when it named none (a decision batch, a lot voided
-- by its number, a console login or an event's replay): the table is an account table like the others,
-- distributed by account_id on Citus (db/citus.go), and account_id is in its primary key.
CREATE TABLE audit_log (
    account_id  text        NOT NULL DEFAULT '',
    id          bigint      GENERATED ALWAYS AS IDENTITY,
    at          timestamptz NOT NULL DEFAULT now(),
    key_name    text        NOT NULL,
    action      text        NOT NULL,
    target_id   text        NOT NULL DEFAULT '',
    status      smallint    NOT NULL,
    outcome     text        NOT NULL,
    remote_addr text        NOT NULL DEFAULT '',
    CONSTRAINT audit_log_pkey PRIMARY KEY (account_id, id),
    CONSTRAINT audit_log_action_check CHECK (action <> ''),
    CONSTRAINT audit_log_status_check CHECK (status BETWEEN 100 AND 599),
    CONSTRAINT audit_log_outcome_check CHECK (outcome <> '')
);

COMMENT ON TABLE audit_log IS
    'Who did what: one row per mutating request, refused request and console action; append-only.';
COMMENT ON COLUMN audit_log.account_id IS
    'The account the request named, '''' when none (the distribution column on Citus).';
COMMENT ON COLUMN audit_log.key_name IS
    'The name of the API key (ONCELEDGER_API_KEYS) that made the request, '''' when none was recognised.';
COMMENT ON COLUMN audit_log.action IS
    'The method and route pattern (POST /v1/accounts/{id}/adjustments), or the console action.';
COMMENT ON COLUMN audit_log.target_id IS
    'The id the request named besides its account (a hold, a lot, an event), '''' when none.';
COMMENT ON COLUMN audit_log.outcome IS
    '''ok'', or the error code the request was answered with (insufficient_scope, invalid_api_key, ...).';
COMMENT ON CONSTRAINT audit_log_status_check ON audit_log IS 'An HTTP status.';
COMMENT ON CONSTRAINT audit_log_pkey ON audit_log IS
    'One row per record; account_id first, so that on Citus the key holds the distribution column.';
COMMENT ON CONSTRAINT audit_log_action_check ON audit_log IS 'Every record says what was done.';
COMMENT ON CONSTRAINT audit_log_outcome_check ON audit_log IS 'Every record says how it ended.';

CREATE INDEX audit_log_id_idx ON audit_log (id);

COMMENT ON INDEX audit_log_id_idx IS 'The newest records first, across accounts: GET /v1/audit and the console''s page.';

CREATE FUNCTION audit_log_refuse_change() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only: % refused', TG_OP
        USING ERRCODE = 'restrict_violation',
              CONSTRAINT = 'audit_log_append_only',
              TABLE = 'audit_log',
              -- Citus relays a shard's error without its constraint and table fields, but with its detail.
              DETAIL = 'constraint audit_log_append_only on table audit_log';
END;
$$;

COMMENT ON FUNCTION audit_log_refuse_change() IS
    'Raises restrict_violation naming constraint audit_log_append_only for any UPDATE, DELETE or TRUNCATE '
    'of the audit trail.';

CREATE TRIGGER audit_log_append_only
    BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_refuse_change();

COMMENT ON TRIGGER audit_log_append_only ON audit_log IS
    'What happened stays as it was recorded.';

CREATE TRIGGER audit_log_no_truncate
    BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_refuse_change();

COMMENT ON TRIGGER audit_log_no_truncate ON audit_log IS
    'The audit trail cannot be emptied wholesale either.';

-- Who reviewed a parked event: verify's silencing of it names them.
ALTER TABLE stripe_events ADD COLUMN reviewed_by text;

COMMENT ON COLUMN stripe_events.reviewed_by IS
    'The key name (or, from the command line, the operator) that last marked this parked event reviewed.';

ALTER TABLE stripe_events ADD CONSTRAINT stripe_events_reviewed_by_check
    CHECK (reviewed_by IS NULL OR reviewed_at IS NOT NULL);

COMMENT ON CONSTRAINT stripe_events_reviewed_by_check ON stripe_events IS
    'A reviewer goes with a review (reviews recorded before reviewers were named have none).';
