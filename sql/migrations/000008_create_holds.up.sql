-- Holds (SPEC §11): credits reserved for work about to happen, each resolved exactly once.
-- Available = accounts.balance - accounts.held. A hold lives under its account (primary key
-- (account_id, id)), so an account's holds shard with it (SPEC §15).

ALTER TABLE accounts
    ADD COLUMN held bigint NOT NULL DEFAULT 0,
    ADD CONSTRAINT accounts_held_nonnegative_check CHECK (held >= 0);

COMMENT ON COLUMN accounts.held IS
    'Sum of the amounts of this account''s holds in status held, moved in the transaction that reserves '
    'or resolves each hold; `onceledger verify` checks it against holds. Available = balance - held.';
COMMENT ON CONSTRAINT accounts_held_nonnegative_check ON accounts IS
    'Reservations never go below zero: a hold is released at most once, by the transaction that moved it '
    'out of held.';

CREATE TABLE holds (
    account_id      text        NOT NULL,
    id              text        NOT NULL,
    amount          bigint      NOT NULL,
    status          text        NOT NULL DEFAULT 'held',
    captured_amount bigint,
    decision_id     text,
    expires_at      timestamptz NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    resolved_at     timestamptz,
    CONSTRAINT holds_pkey PRIMARY KEY (account_id, id),
    CONSTRAINT holds_account_fk FOREIGN KEY (account_id) REFERENCES accounts (id),
    CONSTRAINT holds_id_format_check CHECK (id ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    CONSTRAINT holds_amount_positive_check CHECK (amount > 0),
    CONSTRAINT holds_status_check CHECK (status IN ('held', 'captured', 'voided', 'expired')),
    CONSTRAINT holds_captured_amount_check CHECK (
        CASE WHEN status = 'captured' THEN captured_amount BETWEEN 1 AND amount
             ELSE captured_amount IS NULL AND decision_id IS NULL
        END
    ),
    CONSTRAINT holds_resolved_at_check CHECK ((status = 'held') = (resolved_at IS NULL)),
    CONSTRAINT holds_expires_after_created_check CHECK (expires_at > created_at)
);

COMMENT ON TABLE holds IS
    'A reservation of credits on one account, chosen by the caller''s id (the primary key makes '
    'authorising idempotent). It is created held and leaves held exactly once, by a conditional '
    'UPDATE ... WHERE status = ''held'' in the transaction that releases its reservation (and, for a '
    'capture, posts its usage). Holds are not ledger entries: only a capture moves the balance.';
COMMENT ON CONSTRAINT holds_pkey ON holds IS
    'One hold per (account, id): an authorisation replayed with the same id finds the stored hold. The '
    'account leads, so the key holds on a sharded deployment.';
COMMENT ON CONSTRAINT holds_account_fk ON holds IS
    'Every hold belongs to an existing account.';
COMMENT ON CONSTRAINT holds_id_format_check ON holds IS
    'Hold ids are 1-128 characters of [A-Za-z0-9_.:-], so they embed safely in the dedupe key '
    'hold:{account_id}:{id} and in URLs.';
COMMENT ON CONSTRAINT holds_amount_positive_check ON holds IS
    'A hold reserves a positive number of minor units.';
COMMENT ON CONSTRAINT holds_status_check ON holds IS
    'held (reserving), or one of the terminal states captured, voided, expired.';
COMMENT ON CONSTRAINT holds_captured_amount_check ON holds IS
    'Only a captured hold has a captured amount, from 1 up to the held amount (never above the hold), '
    'and only a captured hold names the decision that captured it.';
COMMENT ON CONSTRAINT holds_resolved_at_check ON holds IS
    'A hold records when it was resolved exactly when it is no longer held: a terminal hold is never held.';
COMMENT ON CONSTRAINT holds_expires_after_created_check ON holds IS
    'A hold expires after it was created (expires_in is at least one second).';
COMMENT ON COLUMN holds.captured_amount IS
    'What the capture took: the amount asked (API), or least(cost, amount) for a decision. A decision '
    'costing more than its hold is still billed in full.';
COMMENT ON COLUMN holds.decision_id IS
    'The decision whose billing captured the hold; null when it was captured through the API (its usage '
    'entry is then keyed hold:{account_id}:{id}).';
COMMENT ON COLUMN holds.expires_at IS
    'On the database clock. A capture needs expires_at > now(); the reconciler pass expires the rest.';

CREATE INDEX holds_held_expires_at_idx ON holds (expires_at) WHERE status = 'held';

COMMENT ON INDEX holds_held_expires_at_idx IS
    'Finds the holds still held whose time is up, for the expiry pass and verify; small, since it only '
    'holds unresolved holds.';

-- NOT VALID: every existing row has a null hold_id, and validating would scan the whole decisions table
-- under an exclusive lock for nothing. New and updated rows are checked as usual.
ALTER TABLE decisions
    ADD COLUMN hold_id text,
    ADD CONSTRAINT decisions_hold_id_format_check CHECK (hold_id ~ '^[A-Za-z0-9_.:-]{1,128}$') NOT VALID;

COMMENT ON COLUMN decisions.hold_id IS
    'The hold (of the same account) this decision spends, if any: billing the decision captures it in '
    'the same transaction, when it is still held and the decision was received while it was live.';
COMMENT ON CONSTRAINT decisions_hold_id_format_check ON decisions IS
    'A hold id as holds_id_format_check accepts it.';
