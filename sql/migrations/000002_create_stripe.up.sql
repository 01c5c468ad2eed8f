-- Stripe: every received event, and the top-up orders that Checkout pays.

CREATE TABLE stripe_events (
    event_id      text        NOT NULL,
    seq           bigint      NOT NULL GENERATED ALWAYS AS IDENTITY,
    type          text        NOT NULL,
    api_version   text        NOT NULL DEFAULT '',
    livemode      boolean     NOT NULL,
    created       timestamptz NOT NULL,
    payload       jsonb       NOT NULL,
    received_at   timestamptz NOT NULL DEFAULT now(),
    outcome       text        NOT NULL,
    parked_reason text,
    payment_intent text,
    outcome_at    timestamptz NOT NULL DEFAULT now(),
    reviewed_at   timestamptz,
    CONSTRAINT stripe_events_pkey PRIMARY KEY (event_id),
    CONSTRAINT stripe_events_seq_key UNIQUE (seq),
    CONSTRAINT stripe_events_outcome_check CHECK (outcome IN ('applied', 'recorded', 'ignored', 'parked')),
    CONSTRAINT stripe_events_parked_reason_check CHECK (
        (outcome = 'parked') = (parked_reason IS NOT NULL)
        AND parked_reason IN ('unknown_payment', 'unknown_account', 'currency_mismatch',
                              'dedupe_conflict', 'refund_list_unavailable')
    )
);

COMMENT ON TABLE stripe_events IS
    'Every verified Stripe event, inserted in the same transaction as its effects. '
    'The primary key makes a redelivered event a no-op.';
COMMENT ON CONSTRAINT stripe_events_pkey ON stripe_events IS
    'A Stripe event is processed at most once: its id is inserted with ON CONFLICT DO NOTHING in the '
    'transaction that applies it, so a redelivery finds it and does nothing.';
COMMENT ON COLUMN stripe_events.seq IS 'Arrival order, for keyset pagination of the operator listing.';
COMMENT ON COLUMN stripe_events.outcome IS
    'applied: its effects were posted (or already were, under their own keys); recorded: kept, never credited '
    '(payment_intent.succeeded, charge.succeeded); ignored: a type we do not handle; parked: kept for later.';
COMMENT ON CONSTRAINT stripe_events_parked_reason_check ON stripe_events IS
    'A parked event always says why, and only parked events have a reason.';
COMMENT ON COLUMN stripe_events.payment_intent IS
    'The payment a refund or dispute event refers to, so that events parked as unknown_payment are '
    're-applied when that payment is recorded.';
COMMENT ON COLUMN stripe_events.reviewed_at IS
    'When an operator last looked at this parked event; verify reports parked events left unreviewed too long.';

CREATE INDEX stripe_events_outcome_seq_idx ON stripe_events (outcome, seq);

COMMENT ON INDEX stripe_events_outcome_seq_idx IS
    'Serves the operator listing filtered by outcome (e.g. parked), in arrival order.';

CREATE INDEX stripe_events_parked_payment_idx ON stripe_events (payment_intent) WHERE outcome = 'parked';

COMMENT ON INDEX stripe_events_parked_payment_idx IS
    'Finds the events waiting for a payment when that payment is recorded.';

CREATE TABLE topups (
    id             text        NOT NULL,
    account_id     text        NOT NULL,
    session_id     text,
    payment_intent text,
    amount         bigint      NOT NULL,
    currency       text        NOT NULL,
    status         text        NOT NULL DEFAULT 'pending',
    checkout_url   text,
    paid_event_id  text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    paid_at        timestamptz,
    CONSTRAINT topups_pkey PRIMARY KEY (id),
    CONSTRAINT topups_account_fk FOREIGN KEY (account_id) REFERENCES accounts (id),
    CONSTRAINT topups_session_id_key UNIQUE (session_id),
    CONSTRAINT topups_payment_intent_key UNIQUE (payment_intent),
    CONSTRAINT topups_amount_positive_check CHECK (amount > 0),
    CONSTRAINT topups_status_check CHECK (status IN ('pending', 'paid')),
    CONSTRAINT topups_paid_consistent_check CHECK ((status = 'paid') = (paid_at IS NOT NULL AND paid_event_id IS NOT NULL))
);

COMMENT ON TABLE topups IS
    'A top-up order: one Stripe Checkout Session buying credits for one account. '
    'It moves from pending to paid at most once, by a conditional UPDATE ... WHERE status = ''pending''; '
    'the credit is posted only in the transaction whose UPDATE made that transition.';
COMMENT ON CONSTRAINT topups_session_id_key ON topups IS 'One order per Checkout Session.';
COMMENT ON CONSTRAINT topups_payment_intent_key ON topups IS
    'One order per payment: refunds and disputes find their account through it.';
COMMENT ON CONSTRAINT topups_paid_consistent_check ON topups IS
    'A paid order records when and by which event it was paid; a pending one records neither.';
