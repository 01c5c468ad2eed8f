-- Auto-recharge and low-balance alerts (SPEC §13), both watching available = balance - held.
--
-- The database decides when: the trigger accounts_available_watch is queued by every UPDATE of accounts
-- that moves balance or held of an account that watches (recharge on, or an alert threshold), which is
-- how every debit moves money (ledger_chain_advance moves the balance of single posts, group commits and
-- billing chunks; holds move held), so no debit path calls anything for it. It runs at commit, inside
-- the debit's transaction, on the account as the transaction leaves it.
--
-- One attempt per low-balance episode: recharge_attempts_episode_key (account_id, episode). The episode
-- is accounts.recharge_episode, advanced only when available rises from below the threshold to it or
-- above after an attempt was made in the episode. One alert of each kind per (account, threshold,
-- episode): balance_alerts_pkey, the episode advanced by the recovery.
--
-- The rows are the outbox of their side effects: an attempt with job_enqueued_at NULL still needs its
-- River job (which creates the PaymentIntent with Idempotency-Key recharge:{id}), an alert or a
-- resolved attempt with its *_enqueued_at NULL still needs its notification. They commit with the
-- debit, and serve's sweeper turns them into River jobs (unique per attempt / notification id) in the
-- transaction that marks them enqueued, so a crash after the debit's commit loses nothing.

ALTER TABLE accounts
    ADD COLUMN stripe_customer    text,
    ADD COLUMN payment_method     text,
    ADD COLUMN recharge_enabled   boolean NOT NULL DEFAULT false,
    ADD COLUMN recharge_threshold bigint,
    ADD COLUMN recharge_amount    bigint,
    ADD COLUMN recharge_episode   bigint  NOT NULL DEFAULT 1,
    ADD COLUMN recharge_failures  integer NOT NULL DEFAULT 0,
    ADD COLUMN low_balance_alert  bigint,
    ADD COLUMN alert_episode      bigint  NOT NULL DEFAULT 1,
    ADD CONSTRAINT accounts_recharge_settings_check CHECK (
        (recharge_threshold IS NULL) = (recharge_amount IS NULL)
        AND recharge_threshold BETWEEN 0 AND 1000000000000000
        AND recharge_amount BETWEEN 1 AND 1000000000000000
    ),
    ADD CONSTRAINT accounts_recharge_enabled_check CHECK (
        NOT recharge_enabled
        OR (recharge_threshold IS NOT NULL AND stripe_customer IS NOT NULL AND payment_method IS NOT NULL)
    ),
    ADD CONSTRAINT accounts_recharge_failures_check CHECK (recharge_failures BETWEEN 0 AND 3),
    ADD CONSTRAINT accounts_low_balance_alert_check CHECK (
        low_balance_alert BETWEEN -1000000000000000 AND 1000000000000000
    );

COMMENT ON COLUMN accounts.stripe_customer IS
    'The Stripe customer a saved card belongs to: created for a top-up asking save_payment_method, '
    'recorded from its completed Checkout Session.';
COMMENT ON COLUMN accounts.payment_method IS
    'The card saved for off-session use (setup_future_usage=off_session), recorded from the payment''s '
    'payment_intent.succeeded. Auto-recharge charges it.';
COMMENT ON COLUMN accounts.recharge_enabled IS
    'Auto-recharge is on (opt-in, PUT /v1/accounts/{id}/recharge); turned off by three failed attempts in a row.';
COMMENT ON COLUMN accounts.recharge_threshold IS
    'A debit leaving available (balance - held) below this starts an attempt, once per episode.';
COMMENT ON COLUMN accounts.recharge_amount IS 'What one recharge attempt buys, in minor units of the account''s currency.';
COMMENT ON COLUMN accounts.recharge_episode IS
    'The current low-balance episode: recharge_attempts holds at most one attempt per episode. Advanced by '
    'accounts_available_watch when available rises to the threshold or above after an attempt.';
COMMENT ON COLUMN accounts.recharge_failures IS
    'Recharge attempts failed in a row; reset by a success or by enabling again. The third disables recharge.';
COMMENT ON COLUMN accounts.low_balance_alert IS
    'Alert threshold (PUT /v1/accounts/{id}/alerts): balance.low when available falls below it, '
    'balance.recovered when it rises back. NULL: no alerts.';
COMMENT ON COLUMN accounts.alert_episode IS
    'The current alert episode for low_balance_alert: advanced by each recovery, so balance_alerts holds one '
    'low and one recovery per crossing.';
COMMENT ON CONSTRAINT accounts_recharge_settings_check ON accounts IS
    'Recharge settings come as a pair: a threshold of 0..10^15 and an amount of 1..10^15, or neither.';
COMMENT ON CONSTRAINT accounts_recharge_enabled_check ON accounts IS
    'Recharge can be on only with settings and a saved card (customer and payment method): enabling '
    'without one is refused by the conditional update as payment_method_required.';
COMMENT ON CONSTRAINT accounts_recharge_failures_check ON accounts IS
    'At most three failures in a row are counted: the third disables recharge.';
COMMENT ON CONSTRAINT accounts_low_balance_alert_check ON accounts IS
    'An alert threshold is within the amounts the API accepts (|N| <= 10^15).';

-- The attempt's order is named after the attempt (rch_{id}), so the trigger takes the id first.
CREATE SEQUENCE recharge_attempts_id_seq AS bigint;
COMMENT ON SEQUENCE recharge_attempts_id_seq IS 'Ids of recharge attempts (and so of their orders, rch_{id}).';

-- An attempt names its order by (account_id, topup_id): the account leads, as on every key of a
-- table distributed by account (SPEC §15).
ALTER TABLE topups ADD CONSTRAINT topups_account_id_key UNIQUE (account_id, id);
COMMENT ON CONSTRAINT topups_account_id_key ON topups IS
    'An order under its account: what recharge_attempts_topup_fk references (it stays unique on a sharded '
    'deployment, where (id) alone cannot).';

CREATE TABLE recharge_attempts (
    account_id        text        NOT NULL,
    id                bigint      NOT NULL DEFAULT nextval('recharge_attempts_id_seq'),
    episode           bigint      NOT NULL,
    topup_id          text        NOT NULL,
    amount            bigint      NOT NULL,
    status            text        NOT NULL DEFAULT 'requested',
    payment_intent    text,
    failure_code      text,
    disabled_recharge boolean     NOT NULL DEFAULT false,
    created_at        timestamptz NOT NULL DEFAULT now(),
    resolved_at       timestamptz,
    job_enqueued_at   timestamptz,
    notice_enqueued_at timestamptz,
    CONSTRAINT recharge_attempts_pkey PRIMARY KEY (account_id, id),
    CONSTRAINT recharge_attempts_episode_key UNIQUE (account_id, episode),
    CONSTRAINT recharge_attempts_topup_key UNIQUE (account_id, topup_id),
    CONSTRAINT recharge_attempts_account_fk FOREIGN KEY (account_id) REFERENCES accounts (id),
    CONSTRAINT recharge_attempts_topup_fk FOREIGN KEY (account_id, topup_id) REFERENCES topups (account_id, id),
    CONSTRAINT recharge_attempts_amount_positive_check CHECK (amount > 0),
    CONSTRAINT recharge_attempts_status_check CHECK (
        status IN ('requested', 'succeeded', 'failed', 'action_required')
    ),
    CONSTRAINT recharge_attempts_resolved_check CHECK ((status = 'requested') = (resolved_at IS NULL)),
    CONSTRAINT recharge_attempts_disabled_check CHECK (NOT disabled_recharge OR status = 'failed')
);

COMMENT ON TABLE recharge_attempts IS
    'One automatic top-up per low-balance episode of an account, inserted by accounts_available_watch in '
    'the transaction of the debit that left available below the threshold. It owns a pending top-up order '
    '(topup_id) that only payment_intent.succeeded pays. It is also the outbox of its '
    'PaymentIntent job and of its notification.';
COMMENT ON COLUMN recharge_attempts.id IS
    'The attempt''s id; Stripe''s Idempotency-Key for its PaymentIntent is recharge:{id}, and its order is rch_{id}.';
ALTER SEQUENCE recharge_attempts_id_seq OWNED BY recharge_attempts.id;
COMMENT ON COLUMN recharge_attempts.topup_id IS
    'The pending order this attempt owns (rch_{id}, no Checkout Session), inserted with it; only '
    'payment_intent.succeeded pays it, through the same pending->paid guard as Checkout orders.';
COMMENT ON COLUMN recharge_attempts.episode IS 'accounts.recharge_episode when the attempt was made.';
COMMENT ON COLUMN recharge_attempts.status IS
    'requested until the webhook resolves it, once, by a conditional UPDATE ... WHERE status = ''requested'': '
    'succeeded (payment_intent.succeeded), failed (payment_intent.payment_failed) or action_required '
    '(the card needs the customer; never retried blindly).';
COMMENT ON COLUMN recharge_attempts.payment_intent IS 'The PaymentIntent the job created, once Stripe answered.';
COMMENT ON COLUMN recharge_attempts.failure_code IS 'Stripe''s code for a failed or paused attempt (last_payment_error.code).';
COMMENT ON COLUMN recharge_attempts.disabled_recharge IS 'This failure was the third in a row and turned recharge off.';
COMMENT ON COLUMN recharge_attempts.job_enqueued_at IS
    'When the sweeper enqueued the River job creating the PaymentIntent; NULL: still to enqueue (outbox).';
COMMENT ON COLUMN recharge_attempts.notice_enqueued_at IS
    'When the sweeper enqueued the notification of the resolution (recharge.failed, recharge.disabled, '
    'recharge.action_required); NULL for a resolved attempt: still to enqueue.';
COMMENT ON CONSTRAINT recharge_attempts_pkey ON recharge_attempts IS
    'Attempts live under their account (distributed by account_id on Citus).';
COMMENT ON CONSTRAINT recharge_attempts_episode_key ON recharge_attempts IS
    'One attempt per low-balance episode: debits racing below the threshold, or a second billing chunk '
    'in the same episode, insert nothing more (ON CONFLICT DO NOTHING).';
COMMENT ON CONSTRAINT recharge_attempts_topup_key ON recharge_attempts IS
    'An order is owned by at most one attempt: the webhook finds the attempt from the order.';
COMMENT ON CONSTRAINT recharge_attempts_topup_fk ON recharge_attempts IS
    'The order the attempt owns exists, under the same account (checked at the end of the trigger''s '
    'statement, which inserts both).';
COMMENT ON CONSTRAINT recharge_attempts_account_fk ON recharge_attempts IS 'Every attempt belongs to an existing account.';
COMMENT ON CONSTRAINT recharge_attempts_amount_positive_check ON recharge_attempts IS 'An attempt buys a positive amount.';
COMMENT ON CONSTRAINT recharge_attempts_status_check ON recharge_attempts IS
    'requested, or one of the terminal states succeeded, failed, action_required.';
COMMENT ON CONSTRAINT recharge_attempts_resolved_check ON recharge_attempts IS
    'An attempt records when it was resolved exactly when it is no longer requested.';
COMMENT ON CONSTRAINT recharge_attempts_disabled_check ON recharge_attempts IS 'Only a failure can disable recharge.';

CREATE INDEX recharge_attempts_job_outbox_idx ON recharge_attempts (id) WHERE job_enqueued_at IS NULL;
COMMENT ON INDEX recharge_attempts_job_outbox_idx IS
    'Finds the attempts whose PaymentIntent job is still to enqueue; small, since the sweeper empties it.';
CREATE INDEX recharge_attempts_notice_outbox_idx ON recharge_attempts (id)
    WHERE status <> 'requested' AND notice_enqueued_at IS NULL;
COMMENT ON INDEX recharge_attempts_notice_outbox_idx IS
    'Finds the resolved attempts whose notification is still to enqueue.';

CREATE TABLE balance_alerts (
    account_id            text        NOT NULL,
    threshold             bigint      NOT NULL,
    episode               bigint      NOT NULL,
    low_available         bigint      NOT NULL,
    low_at                timestamptz NOT NULL DEFAULT now(),
    recovered_available   bigint,
    recovered_at          timestamptz,
    low_enqueued_at       timestamptz,
    recovered_enqueued_at timestamptz,
    CONSTRAINT balance_alerts_pkey PRIMARY KEY (account_id, threshold, episode),
    CONSTRAINT balance_alerts_account_fk FOREIGN KEY (account_id) REFERENCES accounts (id),
    CONSTRAINT balance_alerts_recovered_check CHECK (
        (recovered_at IS NULL) = (recovered_available IS NULL)
        AND (recovered_enqueued_at IS NULL OR recovered_at IS NOT NULL)
    )
);

COMMENT ON TABLE balance_alerts IS
    'One low-balance episode of an account against one alert threshold: created by the debit that took '
    'available below it (balance.low), completed by the credit or release that brought it back '
    '(balance.recovered). The key makes a flapping balance send one alert per crossing, never more. '
    'Also the outbox of both notifications.';
COMMENT ON COLUMN balance_alerts.low_available IS 'Available right after the debit that crossed below.';
COMMENT ON COLUMN balance_alerts.recovered_available IS 'Available right after the change that crossed back; NULL: still low.';
COMMENT ON COLUMN balance_alerts.low_enqueued_at IS 'When balance.low was enqueued; NULL: still to enqueue (outbox).';
COMMENT ON COLUMN balance_alerts.recovered_enqueued_at IS
    'When balance.recovered was enqueued; NULL after a recovery: still to enqueue.';
COMMENT ON CONSTRAINT balance_alerts_pkey ON balance_alerts IS
    'One low alert and one recovery per (account, threshold, episode): the episode advances only on recovery.';
COMMENT ON CONSTRAINT balance_alerts_account_fk ON balance_alerts IS 'Every alert belongs to an existing account.';
COMMENT ON CONSTRAINT balance_alerts_recovered_check ON balance_alerts IS
    'A recovery records its time and available together, and is enqueued only once it happened.';

CREATE INDEX balance_alerts_outbox_idx ON balance_alerts (account_id)
    WHERE low_enqueued_at IS NULL OR (recovered_at IS NOT NULL AND recovered_enqueued_at IS NULL);
COMMENT ON INDEX balance_alerts_outbox_idx IS 'Finds the alerts whose notification is still to enqueue.';

CREATE FUNCTION accounts_available_watch() RETURNS trigger
    LANGUAGE plpgsql AS
$$
DECLARE
    a accounts;
BEGIN
    -- The account as the transaction leaves it (the trigger runs at commit; the row is locked by the
    -- update that queued it), so a capture's two statements are judged by their net effect.
    SELECT * INTO a FROM accounts WHERE id = NEW.id;

    IF a.recharge_enabled AND a.balance - a.held < a.recharge_threshold THEN
        -- Below the threshold: the episode's attempt and the pending order it owns, unless the
        -- episode has its attempt already (recharge_attempts_episode_key).
        WITH attempt AS (
            INSERT INTO recharge_attempts (account_id, id, episode, topup_id, amount)
            SELECT a.id, s.id, a.recharge_episode, 'rch_' || s.id, a.recharge_amount
            FROM (SELECT nextval('recharge_attempts_id_seq') AS id) s
            ON CONFLICT ON CONSTRAINT recharge_attempts_episode_key DO NOTHING
            RETURNING account_id, topup_id, amount
        )
        INSERT INTO topups (id, account_id, amount, currency)
        SELECT topup_id, account_id, amount, a.currency
        FROM attempt;
    ELSIF a.recharge_threshold IS NOT NULL AND a.balance - a.held >= a.recharge_threshold THEN
        -- Back at the threshold or above after an attempt: the next dip is a new episode.
        UPDATE accounts
        SET recharge_episode = recharge_episode + 1
        WHERE id = a.id
          AND EXISTS (SELECT 1 FROM recharge_attempts r WHERE r.account_id = a.id AND r.episode = a.recharge_episode);
    END IF;

    IF a.low_balance_alert IS NULL THEN
        RETURN NULL;
    ELSIF a.balance - a.held < a.low_balance_alert THEN
        -- Below the alert threshold: balance.low, once per episode.
        INSERT INTO balance_alerts (account_id, threshold, episode, low_available)
        VALUES (a.id, a.low_balance_alert, a.alert_episode, a.balance - a.held)
        ON CONFLICT ON CONSTRAINT balance_alerts_pkey DO NOTHING;
    ELSE
        -- Back at or above it after a low alert: balance.recovered, and the next dip is a new episode.
        WITH recovered AS (
            UPDATE balance_alerts
            SET recovered_at = now(), recovered_available = a.balance - a.held
            WHERE account_id = a.id
              AND threshold = a.low_balance_alert
              AND episode = a.alert_episode
              AND recovered_at IS NULL
            RETURNING account_id
        )
        UPDATE accounts
        SET alert_episode = alert_episode + 1
        WHERE id IN (SELECT account_id FROM recovered);
    END IF;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION accounts_available_watch() IS
    'At commit, for an account whose balance or held the transaction moved: below its recharge threshold, '
    'inserts the episode''s one recharge attempt with its pending order; at or above it after an attempt, '
    'starts the next episode. Likewise records balance.low / balance.recovered once per alert episode.';

-- Deferred to commit and judged on the account as the transaction leaves it: a hold's capture releases
-- held and posts its usage in two statements (in either order), and an immediate trigger would see the
-- state between them (a dip below, or a rise above, that never really happened) and start a spurious
-- attempt or episode. The WHEN clause queues nothing for accounts that watch nothing, or for an update
-- that moves neither balance nor held (settings, episode counters).
CREATE CONSTRAINT TRIGGER accounts_available_watch
    AFTER UPDATE ON accounts
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN ((NEW.recharge_enabled OR NEW.low_balance_alert IS NOT NULL)
          AND (NEW.balance, NEW.held) IS DISTINCT FROM (OLD.balance, OLD.held))
    EXECUTE FUNCTION accounts_available_watch();

COMMENT ON TRIGGER accounts_available_watch ON accounts IS
    'Every debit moves accounts.balance or accounts.held with an UPDATE (ledger_chain_advance, holds), so '
    'auto-recharge and alerts happen in the debit''s own transaction on every path (single post, group '
    'commit, billing chunk, hold authorisation and capture) without any path calling for them.';
COMMENT ON CONSTRAINT accounts_available_watch ON accounts IS
    'The constraint entry of the deferred trigger accounts_available_watch (a constraint trigger is what '
    'PostgreSQL can defer to commit).';
