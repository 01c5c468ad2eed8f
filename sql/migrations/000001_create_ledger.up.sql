-- The ledger: accounts and their append-only entries.
-- Every guarantee below is a named object with a COMMENT ON saying what it promises.

CREATE TABLE accounts (
    id         text        NOT NULL,
    currency   text        NOT NULL,
    balance    bigint      NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT accounts_pkey PRIMARY KEY (id),
    CONSTRAINT accounts_id_format_check CHECK (id ~ '^[A-Za-z0-9_.:-]{1,64}$'),
    CONSTRAINT accounts_currency_format_check CHECK (currency ~ '^[a-z]{3}$')
);

COMMENT ON TABLE accounts IS
    'A prepaid-credits account. One currency, fixed at creation; amounts are bigint minor units of it.';
COMMENT ON COLUMN accounts.balance IS
    'Cached sum of this account''s ledger entries, updated in the same transaction as each entry; '
    '`onceledger verify` checks it against the ledger.';
COMMENT ON CONSTRAINT accounts_id_format_check ON accounts IS
    'Account ids are 1-64 characters of [A-Za-z0-9_.:-], so they embed safely in dedupe keys and URLs.';
COMMENT ON CONSTRAINT accounts_currency_format_check ON accounts IS
    'Currency is a lower-case ISO 4217 code, as Stripe writes it; it is never converted.';

CREATE TABLE ledger (
    id          bigint      GENERATED ALWAYS AS IDENTITY,
    account_id  text        NOT NULL,
    kind        text        NOT NULL,
    amount      bigint      NOT NULL,
    description text        NOT NULL DEFAULT '',
    dedupe_key  text,
    payment_intent text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ledger_pkey PRIMARY KEY (id),
    CONSTRAINT ledger_account_fk FOREIGN KEY (account_id) REFERENCES accounts (id),
    CONSTRAINT ledger_kind_sign_check CHECK (
        CASE kind
            WHEN 'topup'          THEN amount > 0
            WHEN 'grant'          THEN amount > 0
            WHEN 'refund_restore' THEN amount > 0
            WHEN 'dispute_won'    THEN amount > 0
            WHEN 'usage'          THEN amount < 0
            WHEN 'refund'         THEN amount < 0
            WHEN 'dispute'        THEN amount < 0
            WHEN 'adjustment'     THEN amount <> 0
            ELSE false
        END
    )
);

COMMENT ON TABLE ledger IS
    'Append-only journal of every money movement. A row is never updated or deleted (ledger_append_only).';
COMMENT ON COLUMN ledger.dedupe_key IS
    'Names the effect this entry is ("stripe:refund:re_..."). At most one entry per key (ledger_dedupe_idx).';
COMMENT ON COLUMN ledger.payment_intent IS
    'The Stripe payment_intent a topup, refund or dispute entry belongs to; verify checks that the '
    'reversals of one payment never exceed its credit.';
COMMENT ON CONSTRAINT ledger_account_fk ON ledger IS
    'Every entry belongs to an existing account.';
COMMENT ON CONSTRAINT ledger_kind_sign_check ON ledger IS
    'Credits are positive and debits negative, per kind: topup, grant, refund_restore, dispute_won > 0; '
    'usage, refund, dispute < 0; adjustment non-zero. Any other kind is refused.';

CREATE UNIQUE INDEX ledger_dedupe_idx ON ledger (dedupe_key) WHERE dedupe_key IS NOT NULL;

COMMENT ON INDEX ledger_dedupe_idx IS
    'An effect with a dedupe key is posted at most once. Posting uses '
    'INSERT ... ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING, so a replay inserts nothing.';

CREATE INDEX ledger_account_id_idx ON ledger (account_id, id);

COMMENT ON INDEX ledger_account_id_idx IS
    'Serves an account''s entries newest first with keyset pagination on id, and the balance check in verify.';

CREATE INDEX ledger_payment_intent_idx ON ledger (payment_intent) WHERE payment_intent IS NOT NULL;

COMMENT ON INDEX ledger_payment_intent_idx IS
    'Finds the credit and reversals of one Stripe payment.';

CREATE FUNCTION ledger_refuse_change() RETURNS trigger
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

CREATE TRIGGER ledger_append_only
    BEFORE UPDATE OR DELETE ON ledger
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();

COMMENT ON TRIGGER ledger_append_only ON ledger IS
    'Entries are never changed or deleted: corrections are new entries.';

CREATE TRIGGER ledger_no_truncate
    BEFORE TRUNCATE ON ledger
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

COMMENT ON TRIGGER ledger_no_truncate ON ledger IS
    'The ledger cannot be emptied wholesale either.';
