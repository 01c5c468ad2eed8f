-- Decisions: the billable units of work the product reports; the reconciler bills each once as usage.

CREATE TABLE decisions (
    id          text        NOT NULL,
    seq         bigint      NOT NULL GENERATED ALWAYS AS IDENTITY,
    account_id  text        NOT NULL,
    cost        bigint      NOT NULL,
    occurred_at timestamptz NOT NULL DEFAULT now(),
    received_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT decisions_pkey PRIMARY KEY (id),
    CONSTRAINT decisions_seq_key UNIQUE (seq),
    CONSTRAINT decisions_id_format_check CHECK (id ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    CONSTRAINT decisions_cost_positive_check CHECK (cost > 0)
);

COMMENT ON TABLE decisions IS
    'Billable decisions as the product reported them. Billing posts one usage entry keyed decision:{id}; '
    'ledger_dedupe_idx, not a flag here, makes re-reading a decision harmless. No foreign key to accounts: '
    'a decision may arrive before its account and is billed once the account exists.';
COMMENT ON CONSTRAINT decisions_pkey ON decisions IS
    'A decision id is stored once; intake reports the same id with another account or cost as a conflict.';
COMMENT ON CONSTRAINT decisions_cost_positive_check ON decisions IS
    'A decision costs a positive number of minor units (it is posted negated, as usage).';
COMMENT ON COLUMN decisions.seq IS
    'Arrival order: the reconciler reads in chunks by seq. Any cursor over it is an optimisation only.';
