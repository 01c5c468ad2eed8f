-- Every constraint, index, trigger and table says what it guarantees (the catalog test holds this),
-- and the append-only trigger names itself in its error, so that the application recognises a refused
-- change by the constraint's name and its table rather than by the wording of the message.

COMMENT ON CONSTRAINT accounts_pkey ON accounts IS
    'One account per id: concurrent creations of the same account collapse to one (ON CONFLICT (id) DO NOTHING).';

COMMENT ON CONSTRAINT ledger_pkey ON ledger IS
    'One entry per id. Ids come from an identity and only grow, which the keyset pagination of an account''s '
    'entries relies on.';

COMMENT ON CONSTRAINT stripe_events_seq_key ON stripe_events IS
    'One arrival position per event, so that paging the operator listing by seq never repeats or skips one.';
COMMENT ON CONSTRAINT stripe_events_outcome_check ON stripe_events IS
    'An event is applied, recorded, ignored or parked; nothing else (see the comment on the outcome column).';

COMMENT ON CONSTRAINT topups_pkey ON topups IS
    'One order per id; the id is named in the Checkout Session''s metadata (topup_id).';
COMMENT ON CONSTRAINT topups_account_fk ON topups IS
    'Every order buys credits for an existing account.';
COMMENT ON CONSTRAINT topups_amount_positive_check ON topups IS
    'An order buys a positive number of minor units.';
COMMENT ON CONSTRAINT topups_status_check ON topups IS
    'An order is pending or paid; nothing else.';
COMMENT ON COLUMN topups.status IS
    'pending until the webhook''s conditional UPDATE ... WHERE status = ''pending'' makes it paid, at most once; '
    'only the transaction that made that transition posts the credit.';

COMMENT ON CONSTRAINT decisions_seq_key ON decisions IS
    'One arrival position per decision, so that billing reads every decision exactly once in seq order.';
COMMENT ON CONSTRAINT decisions_id_format_check ON decisions IS
    'Decision ids are 1-128 characters of [A-Za-z0-9_.:-], so they embed safely in dedupe keys (decision:{id}).';

CREATE OR REPLACE FUNCTION ledger_refuse_change() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    RAISE EXCEPTION 'ledger entries are append-only: % refused', TG_OP
        USING ERRCODE = 'restrict_violation',
              CONSTRAINT = 'ledger_append_only',
              TABLE = TG_TABLE_NAME,
              HINT = 'Post a compensating entry instead.';
END;
$$;

COMMENT ON FUNCTION ledger_refuse_change() IS
    'Raises restrict_violation naming constraint ledger_append_only on table ledger for any UPDATE, DELETE '
    'or TRUNCATE of the ledger.';
