-- Standing proof that Stripe and the ledger agree (SPEC §20). The drift pass (internal/reconcile,
-- `onceledger reconcile --stripe` and serve every STRIPE_RECONCILE_INTERVAL) lists the Stripe objects
-- of a window, matches each to its ledger effect by key, and every money-backed ledger credit of the
-- window to its Stripe object. What does not match is a row of stripe_drift, kept until a later pass
-- finds it matched; a window where everything matched is a row of stripe_drift_checkpoints.
--
-- Neither table moves money or guards it: they are the pass's report, written in one short
-- transaction after every Stripe call of the pass has answered.

CREATE TABLE stripe_drift (
    account_id     text        NOT NULL,
    reason         text        NOT NULL,
    object_id      text        NOT NULL,
    payment_intent text,
    stripe_amount  bigint,
    ledger_amount  bigint,
    currency       text,
    detail         text        NOT NULL DEFAULT '',
    event_id       text,
    object_created timestamptz NOT NULL,
    found_at       timestamptz NOT NULL DEFAULT now(),
    last_seen_at   timestamptz NOT NULL DEFAULT now(),
    resolved_at    timestamptz,
    CONSTRAINT stripe_drift_pkey PRIMARY KEY (account_id, reason, object_id),
    CONSTRAINT stripe_drift_reason_check CHECK (
        reason IN ('missing_credit', 'amount_differs', 'unknown_payment', 'missing_refund', 'missing_dispute',
                   'status_differs')
    ),
    CONSTRAINT stripe_drift_resolved_check CHECK (resolved_at IS NULL OR resolved_at >= found_at)
);

COMMENT ON TABLE stripe_drift IS
    'A difference between Stripe and the ledger found by the drift pass: a Stripe payment, refund or dispute '
    'of this deployment without its ledger effect (or with another amount or state), or a money-backed credit '
    'without its Stripe object. Open while resolved_at is NULL; a later pass that finds it matched resolves it.';
COMMENT ON COLUMN stripe_drift.account_id IS
    'The account the drift is on: the order''s account for a Stripe object, the entry''s for a ledger credit. '
    'The empty string when no account is known (a Stripe object of this deployment whose order names none): '
    'a fixed placeholder rather than NULL, because it is part of the primary key, which on Citus must '
    'include the distribution column (SPEC §15). No foreign key to accounts, for the same reason.';
COMMENT ON COLUMN stripe_drift.reason IS
    'missing_credit: a succeeded payment has no topup credit; amount_differs: its credit, refund or dispute '
    'entry moved another amount (or the payment was credited twice, or in another currency); unknown_payment: '
    'a money-backed credit whose Stripe object does not exist; missing_refund / missing_dispute: a refund or '
    'chargeback of one of our payments took nothing back; status_differs: the restore of a refund or dispute '
    'is missing although Stripe says it failed or was won, or posted although Stripe says otherwise, or a '
    'credited payment did not succeed.';
COMMENT ON COLUMN stripe_drift.object_id IS
    'The Stripe object the drift is about: a payment''s PaymentIntent (a Checkout Session and its '
    'PaymentIntent are one payment, reported once, under the PaymentIntent), a refund, a dispute; for a '
    'credit naming no payment, its dedupe key.';
COMMENT ON COLUMN stripe_drift.stripe_amount IS 'What Stripe says moved, in minor units; NULL: no Stripe object.';
COMMENT ON COLUMN stripe_drift.ledger_amount IS
    'What the ledger moved for it (the credits of a payment, the reversal of a refund or dispute), as a '
    'positive number of minor units; NULL: no entry.';
COMMENT ON COLUMN stripe_drift.event_id IS
    'A stored, parked Stripe event of the object whose replay would post the missing effect; NULL when none '
    'is stored (the webhook never delivered it: missed-event recovery or a resend from Stripe brings it).';
COMMENT ON COLUMN stripe_drift.object_created IS
    'When Stripe created the object; for a credit without one (unknown_payment), when the credit was posted.';
COMMENT ON COLUMN stripe_drift.last_seen_at IS 'When a pass last found this drift.';
COMMENT ON COLUMN stripe_drift.resolved_at IS
    'When a later pass found the object matched; NULL while open. A drift found again is reopened.';
COMMENT ON CONSTRAINT stripe_drift_pkey ON stripe_drift IS
    'One row per account, reason and object: a pass that finds the same drift again refreshes its row '
    '(ON CONFLICT DO UPDATE), so re-runs add nothing. The account leads, for Citus (SPEC §15).';
COMMENT ON CONSTRAINT stripe_drift_reason_check ON stripe_drift IS
    'A drift is one of the six reasons of SPEC §20; nothing else.';
COMMENT ON CONSTRAINT stripe_drift_resolved_check ON stripe_drift IS
    'A drift is resolved after it was found, never before.';

CREATE INDEX stripe_drift_open_idx ON stripe_drift (object_id) WHERE resolved_at IS NULL;

COMMENT ON INDEX stripe_drift_open_idx IS
    'The open drift only (a few rows however long the history): what a pass resolves by object, what the '
    'report, the console and the gauge list.';

CREATE TABLE stripe_drift_checkpoints (
    window_start timestamptz NOT NULL,
    window_end   timestamptz NOT NULL,
    objects      integer     NOT NULL,
    credits      integer     NOT NULL,
    digest       text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT stripe_drift_checkpoints_pkey PRIMARY KEY (window_start, window_end),
    CONSTRAINT stripe_drift_checkpoints_window_check CHECK (window_end > window_start),
    CONSTRAINT stripe_drift_checkpoints_counts_check CHECK (objects >= 0 AND credits >= 0),
    CONSTRAINT stripe_drift_checkpoints_digest_check CHECK (digest ~ '^[0-9a-f]{64}$')
);

COMMENT ON TABLE stripe_drift_checkpoints IS
    'A window in which the drift pass matched every Stripe object of this deployment to its ledger effect and '
    'every money-backed credit to its Stripe object: "drift 0", recorded. Deployment-wide, so it has no '
    'account; on Citus it is distributed by window_start.';
COMMENT ON COLUMN stripe_drift_checkpoints.objects IS
    'Stripe objects matched: payments (a Checkout Session and its PaymentIntent counted once), refunds and '
    'disputes that move money.';
COMMENT ON COLUMN stripe_drift_checkpoints.credits IS 'Money-backed ledger credits posted in the window, all matched.';
COMMENT ON COLUMN stripe_drift_checkpoints.digest IS
    'SHA-256 (hex) of the sorted match list (object, amount, the dedupe keys of its entries): two passes '
    'that matched the same things give the same digest.';
COMMENT ON CONSTRAINT stripe_drift_checkpoints_pkey ON stripe_drift_checkpoints IS
    'One checkpoint per window: the first clean pass records it (ON CONFLICT DO NOTHING); re-runs add nothing.';
COMMENT ON CONSTRAINT stripe_drift_checkpoints_window_check ON stripe_drift_checkpoints IS
    'A window ends after it starts.';
COMMENT ON CONSTRAINT stripe_drift_checkpoints_counts_check ON stripe_drift_checkpoints IS
    'Counts are never negative.';
COMMENT ON CONSTRAINT stripe_drift_checkpoints_digest_check ON stripe_drift_checkpoints IS
    'The digest is a SHA-256 in lower-case hex.';

COMMENT ON INDEX ledger_credits_created_idx IS
    'The money-backed credits (topup, refund_restore, dispute_won) by posting time: the drift pass reads a '
    'window''s through it (StripeDriftCreditsBetween) instead of scanning the ledger.';
