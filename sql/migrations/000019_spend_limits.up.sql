-- Spend limits (SPEC §16): caps per calendar period that hold under any concurrency. A limit applies to
-- the whole account, one subject (who spent) or one feature; its current window counts what was held and
-- spent in it. A hard limit is an admission rule: authorising a hold moves every applicable window's held
-- by a conditional UPDATE (spent + held + amount <= cap) in the transaction that reserves the balance. Every
-- table leads with account_id, so a limit, its windows and the holds counted in them live on the
-- account's shard (SPEC §15).

-- Who spent and on what: stored on the hold and the decision, matched against the limits' scopes.
-- NOT VALID: every existing row has null subject and feature, and validating would scan the tables under
-- an exclusive lock for nothing. New and updated rows are checked as usual.
-- Each constraint is its own ALTER TABLE: Citus runs no ADD CONSTRAINT beside other subcommands on a
-- distributed table, and a cluster upgraded from an earlier release has these tables distributed.
ALTER TABLE holds
    ADD COLUMN subject text,
    ADD COLUMN feature text,
    ADD COLUMN limit_ids text[] NOT NULL DEFAULT '{}',
    ADD COLUMN window_starts timestamptz[] NOT NULL DEFAULT '{}';
ALTER TABLE holds
    ADD CONSTRAINT holds_subject_format_check CHECK (subject ~ '^[A-Za-z0-9_.:@-]{1,128}$') NOT VALID;
ALTER TABLE holds
    ADD CONSTRAINT holds_feature_format_check CHECK (feature ~ '^[A-Za-z0-9_.:-]{1,64}$') NOT VALID;
ALTER TABLE holds
    ADD CONSTRAINT holds_windows_check CHECK (cardinality(limit_ids) = cardinality(window_starts)) NOT VALID;
ALTER TABLE decisions
    ADD COLUMN subject text,
    ADD COLUMN feature text;
ALTER TABLE decisions
    ADD CONSTRAINT decisions_subject_format_check CHECK (subject ~ '^[A-Za-z0-9_.:@-]{1,128}$') NOT VALID;
ALTER TABLE decisions
    ADD CONSTRAINT decisions_feature_format_check CHECK (feature ~ '^[A-Za-z0-9_.:-]{1,64}$') NOT VALID;

COMMENT ON COLUMN holds.subject IS 'Who the hold spends for (a user, an API client, an agent); NULL: nobody named.';
COMMENT ON COLUMN holds.feature IS 'What the hold spends on; NULL: nothing named.';
COMMENT ON COLUMN holds.limit_ids IS
    'The spend limits the hold was counted against when it was authorised (those that applied then), in '
    'lockstep with window_starts: its capture, void or expiry moves exactly those windows, whatever the '
    'limits became since. A limit created after the hold (spend_limits.created_at) is never moved by it.';
COMMENT ON COLUMN holds.window_starts IS 'The start of the window of each of limit_ids the hold was counted in.';
COMMENT ON CONSTRAINT holds_windows_check ON holds IS 'One window start per limit the hold was counted against.';
COMMENT ON COLUMN decisions.subject IS 'Who the decision spent for; NULL: nobody named.';
COMMENT ON COLUMN decisions.feature IS 'What the decision spent on; NULL: nothing named.';
COMMENT ON CONSTRAINT holds_subject_format_check ON holds IS
    'A subject is 1-128 characters of [A-Za-z0-9_.:@-] (an e-mail address fits).';
COMMENT ON CONSTRAINT holds_feature_format_check ON holds IS 'A feature is 1-64 characters of [A-Za-z0-9_.:-].';
COMMENT ON CONSTRAINT decisions_subject_format_check ON decisions IS 'A subject as holds_subject_format_check accepts it.';
COMMENT ON CONSTRAINT decisions_feature_format_check ON decisions IS 'A feature as holds_feature_format_check accepts it.';

CREATE TABLE spend_limits (
    account_id  text        NOT NULL,
    id          text        NOT NULL,
    scope       text        NOT NULL,
    scope_value text,
    period      text        NOT NULL,
    amount      bigint      NOT NULL,
    mode        text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    defined_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT spend_limits_pkey PRIMARY KEY (account_id, id),
    CONSTRAINT spend_limits_account_fk FOREIGN KEY (account_id) REFERENCES accounts (id),
    CONSTRAINT spend_limits_id_format_check CHECK (id ~ '^[A-Za-z0-9_.:-]{1,64}$'),
    CONSTRAINT spend_limits_scope_check CHECK (
        CASE scope
            WHEN 'account' THEN scope_value IS NULL
            WHEN 'subject' THEN scope_value ~ '^[A-Za-z0-9_.:@-]{1,128}$'
            WHEN 'feature' THEN scope_value ~ '^[A-Za-z0-9_.:-]{1,64}$'
            ELSE false
        END
    ),
    CONSTRAINT spend_limits_period_check CHECK (period IN ('day', 'week', 'month')),
    CONSTRAINT spend_limits_amount_positive_check CHECK (amount > 0),
    CONSTRAINT spend_limits_mode_check CHECK (mode IN ('hard', 'soft'))
);

COMMENT ON TABLE spend_limits IS
    'A cap on what an account (or one subject or feature of it) spends per calendar period in UTC on the '
    'database clock. Hard: an authorisation that would take a window beyond it is refused. Soft: crossing it '
    'sends limit.reached once per window. Replacing a limit keeps what its windows counted.';
COMMENT ON COLUMN spend_limits.scope_value IS 'The subject or feature the limit applies to; NULL for an account limit.';
COMMENT ON COLUMN spend_limits.defined_at IS
    'When the limit took its current definition (created or replaced): verify recounts a window''s spent from '
    'the decisions only when the definition did not change during the window.';
COMMENT ON CONSTRAINT spend_limits_pkey ON spend_limits IS
    'One limit per (account, id), the caller''s id: PUT replaces it. The account leads, for sharding.';
COMMENT ON CONSTRAINT spend_limits_account_fk ON spend_limits IS 'Every limit belongs to an existing account.';
COMMENT ON CONSTRAINT spend_limits_id_format_check ON spend_limits IS 'Limit ids are 1-64 characters of [A-Za-z0-9_.:-], safe in URLs.';
COMMENT ON CONSTRAINT spend_limits_scope_check ON spend_limits IS
    'account (no scope_value), subject (a subject as holds accept it) or feature (a feature as holds accept it).';
COMMENT ON CONSTRAINT spend_limits_period_check ON spend_limits IS
    'Calendar windows in UTC: a day, a week starting Monday, a month.';
COMMENT ON CONSTRAINT spend_limits_amount_positive_check ON spend_limits IS 'A cap is a positive number of minor units.';
COMMENT ON CONSTRAINT spend_limits_mode_check ON spend_limits IS 'hard (refuses authorisations) or soft (notifies).';

CREATE TABLE spend_windows (
    account_id         text        NOT NULL,
    limit_id           text        NOT NULL,
    window_start       timestamptz NOT NULL,
    spent              bigint      NOT NULL DEFAULT 0,
    held               bigint      NOT NULL DEFAULT 0,
    over               bigint      NOT NULL DEFAULT 0,
    reached_at         timestamptz,
    reached_enqueued_at timestamptz,
    CONSTRAINT spend_windows_pkey PRIMARY KEY (account_id, limit_id, window_start),
    CONSTRAINT spend_windows_limit_fk FOREIGN KEY (account_id, limit_id)
        REFERENCES spend_limits (account_id, id) ON DELETE CASCADE,
    CONSTRAINT spend_windows_counts_check CHECK (spent >= 0 AND held >= 0 AND over >= 0),
    CONSTRAINT spend_windows_reached_check CHECK (reached_enqueued_at IS NULL OR reached_at IS NOT NULL)
);

COMMENT ON TABLE spend_windows IS
    'What one limit counted in one calendar window: held (holds in held authorised in it), spent (captures '
    'and billed decisions), over (what decisions billed beyond a hard cap). Created by the first statement '
    'that counts in it (INSERT ... ON CONFLICT DO NOTHING under the account''s lock), moved only under it.';
COMMENT ON COLUMN spend_windows.held IS
    'The amounts of the holds in held counted here (holds.limit_ids, window_starts): moved by the authorisation (conditionally, '
    'for a hard limit: spent + held + amount <= cap), released by capture, void and expiry.';
COMMENT ON COLUMN spend_windows.spent IS
    'Captured amounts of the holds counted here, plus what billed decisions spent beyond their hold.';
COMMENT ON COLUMN spend_windows.over IS
    'What decisions billed without a hold (or beyond it) took past a hard cap: the work was done and is '
    'billed in full; a product that wants no overshoot authorises first.';
COMMENT ON COLUMN spend_windows.reached_at IS
    'When spent + held first reached a soft limit''s cap in this window: limit.reached, once per window.';
COMMENT ON COLUMN spend_windows.reached_enqueued_at IS 'When limit.reached was enqueued; NULL after reached_at: still to enqueue (outbox).';
COMMENT ON CONSTRAINT spend_windows_pkey ON spend_windows IS
    'One window per (account, limit, start): every statement that counts finds the same row.';
COMMENT ON CONSTRAINT spend_windows_limit_fk ON spend_windows IS
    'A window belongs to its limit and goes with it when the limit is deleted.';
COMMENT ON CONSTRAINT spend_windows_counts_check ON spend_windows IS
    'Counts never go below zero: a hold is released from its windows at most once, by the transaction that '
    'moved it out of held.';
COMMENT ON CONSTRAINT spend_windows_reached_check ON spend_windows IS 'limit.reached is enqueued only once it happened.';

CREATE INDEX spend_windows_reached_outbox_idx ON spend_windows (account_id)
    WHERE reached_at IS NOT NULL AND reached_enqueued_at IS NULL;
COMMENT ON INDEX spend_windows_reached_outbox_idx IS 'Finds the windows whose limit.reached is still to enqueue.';
