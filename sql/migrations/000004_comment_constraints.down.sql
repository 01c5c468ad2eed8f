CREATE OR REPLACE FUNCTION ledger_refuse_change() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    RAISE EXCEPTION 'ledger entries are append-only: % refused', TG_OP
        USING ERRCODE = 'restrict_violation',
              HINT = 'Post a compensating entry instead.';
END;
$$;

COMMENT ON FUNCTION ledger_refuse_change() IS
    'Raises restrict_violation for any UPDATE, DELETE or TRUNCATE of the ledger.';

COMMENT ON CONSTRAINT decisions_id_format_check ON decisions IS NULL;
COMMENT ON CONSTRAINT decisions_seq_key ON decisions IS NULL;
COMMENT ON COLUMN topups.status IS NULL;
COMMENT ON CONSTRAINT topups_status_check ON topups IS NULL;
COMMENT ON CONSTRAINT topups_amount_positive_check ON topups IS NULL;
COMMENT ON CONSTRAINT topups_account_fk ON topups IS NULL;
COMMENT ON CONSTRAINT topups_pkey ON topups IS NULL;
COMMENT ON CONSTRAINT stripe_events_outcome_check ON stripe_events IS NULL;
COMMENT ON CONSTRAINT stripe_events_seq_key ON stripe_events IS NULL;
COMMENT ON CONSTRAINT ledger_pkey ON ledger IS NULL;
COMMENT ON CONSTRAINT accounts_pkey ON accounts IS NULL;
