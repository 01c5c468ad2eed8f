-- Recharge guardrails (SPEC §17): a budget per calendar window, a cooldown, a failure ladder with hard
-- declines, a target mode, and a reason recorded for every attempt not made.
--
-- Where each guarantee is held:
--   * At most budget count attempts and budget amount per window: recharge_windows_budget_check, on the
--     window row that accounts_available_watch moves by a conditional upsert in the debit's own
--     transaction (no prior read). A refused upsert creates no attempt.
--   * The cooldown: accounts.recharge_next_eligible_at, claimed by a conditional UPDATE of the account
--     row in the same transaction (the row the debit locked), given back when the budget refuses.
--   * One attempt per (episode, retry): recharge_attempts_episode_key, now (account_id, episode, retry).
--     A retry is made by raising accounts.recharge_retry (the River job of the ladder), which queues the
--     same deferred trigger, so a retry passes the same budget and cooldown as a first attempt.
--   * One recharge.blocked per (account, episode, reason): recharge_blocks_pkey.
--   * Hard declines stop at once: recharge_attempts.hard_decline is computed by the schema from the
--     decline code, and the failure's UPDATE of the account forgets the card.
--   * One recharge.status_changed per change of the status: accounts.recharge_status is moved by
--     recharge_status_sync in the transaction that changes what the status is computed from (this
--     trigger, the PUT, an attempt's resolution, the sweep of elapsed cooldowns and windows), by an
--     UPDATE conditional on the transition number it read (recharge_status_seq); the transition is
--     recorded under recharge_status_changes_pkey (account_id, seq).

-- Each constraint is its own ALTER TABLE: Citus runs no ADD CONSTRAINT beside other subcommands on a
-- distributed table, and a cluster upgraded from an earlier release has these tables distributed.
ALTER TABLE accounts
    ADD COLUMN recharge_budget_amount    bigint,
    ADD COLUMN recharge_budget_count     integer,
    ADD COLUMN recharge_budget_period    text,
    ADD COLUMN recharge_cooldown         interval NOT NULL DEFAULT '0s',
    ADD COLUMN recharge_mode             text     NOT NULL DEFAULT 'fixed',
    ADD COLUMN recharge_target           bigint,
    ADD COLUMN recharge_next_eligible_at timestamptz,
    ADD COLUMN recharge_retry            integer  NOT NULL DEFAULT 0,
    ADD COLUMN recharge_stopped          text;
ALTER TABLE accounts
    ADD CONSTRAINT accounts_recharge_budget_check CHECK (
        (recharge_budget_period IS NULL) = (recharge_budget_amount IS NULL AND recharge_budget_count IS NULL)
        AND recharge_budget_period IN ('day', 'week', 'month')
        AND recharge_budget_amount BETWEEN 1 AND 1000000000000000
        AND recharge_budget_count BETWEEN 1 AND 1000000
        AND (recharge_mode <> 'fixed' OR recharge_budget_amount >= recharge_amount)
    );
ALTER TABLE accounts
    ADD CONSTRAINT accounts_recharge_cooldown_check CHECK (
        recharge_cooldown BETWEEN interval '0s' AND interval '30 days'
    );
ALTER TABLE accounts
    ADD CONSTRAINT accounts_recharge_mode_check CHECK (
        recharge_mode IN ('fixed', 'target')
        AND (recharge_mode = 'fixed' OR (recharge_target IS NOT NULL AND recharge_target > recharge_threshold
                                         AND recharge_target <= 1000000000000000))
    );
ALTER TABLE accounts
    ADD CONSTRAINT accounts_recharge_retry_check CHECK (recharge_retry BETWEEN 0 AND 3);
ALTER TABLE accounts
    ADD CONSTRAINT accounts_recharge_stopped_check CHECK (
        recharge_stopped IS NULL
        OR (recharge_stopped IN ('disabled_after_failures', 'payment_method_required') AND NOT recharge_enabled)
    );

COMMENT ON COLUMN accounts.recharge_budget_amount IS
    'At most this much asked of the card per budget window (NULL: no amount budget).';
COMMENT ON COLUMN accounts.recharge_budget_count IS 'At most this many attempts per budget window (NULL: no count budget).';
COMMENT ON COLUMN accounts.recharge_budget_period IS
    'The budget''s calendar window, in UTC on the database clock: day, week (from Monday) or month. NULL: no budget.';
COMMENT ON COLUMN accounts.recharge_cooldown IS 'The least time between the creation of two attempts (0 to 30 days).';
COMMENT ON COLUMN accounts.recharge_mode IS
    'fixed: an attempt buys recharge_amount; target: it buys what brings available back to recharge_target '
    '(open holds and debt included), never less than Stripe''s minimum charge for the currency.';
COMMENT ON COLUMN accounts.recharge_target IS 'The available balance a target-mode attempt restores.';
COMMENT ON COLUMN accounts.recharge_next_eligible_at IS
    'No attempt is created before this time: the last attempt''s creation plus the cooldown. Claimed by the '
    'conditional UPDATE of accounts_available_watch that creates an attempt.';
COMMENT ON COLUMN accounts.recharge_retry IS
    'The retry of the current episode that the next attempt would be (0: the first). Raised only by the '
    'failure ladder''s job; reset with each new episode.';
COMMENT ON COLUMN accounts.recharge_stopped IS
    'Why recharge was turned off by its failures: disabled_after_failures (three in a row) or '
    'payment_method_required (a hard decline forgot the card). NULL when it was not; cleared by a PUT.';
COMMENT ON CONSTRAINT accounts_recharge_budget_check ON accounts IS
    'A budget names its window and at least one of amount (1..10^15) and count (1..10^6); in fixed mode it '
    'allows at least one recharge.';
COMMENT ON CONSTRAINT accounts_recharge_cooldown_check ON accounts IS 'A cooldown is between 0 and 30 days.';
COMMENT ON CONSTRAINT accounts_recharge_mode_check ON accounts IS
    'fixed or target; target mode restores a target above the threshold (and within 10^15).';
COMMENT ON CONSTRAINT accounts_recharge_retry_check ON accounts IS
    'An episode has at most three retries (the ladder 1h, 6h, 24h).';
COMMENT ON CONSTRAINT accounts_recharge_stopped_check ON accounts IS
    'A reason for stopping is one the failure ladder gives, and recharge is off while it stands.';

-- One row per account, budget period and calendar window: the attempts made in it and what they asked.
CREATE TABLE recharge_windows (
    account_id       text        NOT NULL,
    period           text        NOT NULL,
    window_start     timestamptz NOT NULL,
    attempts         integer     NOT NULL,
    recharged_amount bigint      NOT NULL,
    max_attempts     integer,
    max_amount       bigint,
    CONSTRAINT recharge_windows_pkey PRIMARY KEY (account_id, period, window_start),
    CONSTRAINT recharge_windows_account_fk FOREIGN KEY (account_id) REFERENCES accounts (id),
    CONSTRAINT recharge_windows_period_check CHECK (period IN ('day', 'week', 'month')),
    CONSTRAINT recharge_windows_budget_check CHECK (
        attempts BETWEEN 1 AND coalesce(max_attempts, attempts)
        AND recharged_amount BETWEEN 1 AND coalesce(max_amount, recharged_amount)
    )
);

COMMENT ON TABLE recharge_windows IS
    'The recharge budget''s usage per calendar window: moved by accounts_available_watch, in the transaction '
    'that creates an attempt, by an upsert whose condition is the budget. An attempt beyond it is not created.';
COMMENT ON COLUMN recharge_windows.attempts IS 'Attempts created in the window (first attempts and retries alike).';
COMMENT ON COLUMN recharge_windows.recharged_amount IS 'What those attempts asked of the card, charged or declined.';
COMMENT ON COLUMN recharge_windows.max_attempts IS 'The budget count when the window last admitted an attempt.';
COMMENT ON COLUMN recharge_windows.max_amount IS 'The budget amount when the window last admitted an attempt.';
COMMENT ON CONSTRAINT recharge_windows_pkey ON recharge_windows IS
    'One row per account, period and window (distributed by account_id on Citus).';
COMMENT ON CONSTRAINT recharge_windows_account_fk ON recharge_windows IS 'Every window belongs to an existing account.';
COMMENT ON CONSTRAINT recharge_windows_period_check ON recharge_windows IS 'day, week or month.';
COMMENT ON CONSTRAINT recharge_windows_budget_check ON recharge_windows IS
    'A window never holds more attempts, or more asked, than the budget that admitted its last attempt: '
    'the upsert that would pass it is refused by its condition, and this check fails any statement that '
    'forgets the condition.';

-- One row per (account, episode, reason) an attempt was not made for: the reason shown, and the outbox
-- of its one recharge.blocked.
CREATE TABLE recharge_blocks (
    account_id         text        NOT NULL,
    episode            bigint      NOT NULL,
    reason             text        NOT NULL,
    blocked_at         timestamptz NOT NULL DEFAULT now(),
    next_eligible_at   timestamptz NOT NULL,
    notice_enqueued_at timestamptz,
    CONSTRAINT recharge_blocks_pkey PRIMARY KEY (account_id, episode, reason),
    CONSTRAINT recharge_blocks_account_fk FOREIGN KEY (account_id) REFERENCES accounts (id),
    CONSTRAINT recharge_blocks_reason_check CHECK (reason IN ('cooling_down', 'budget_exhausted'))
);

COMMENT ON TABLE recharge_blocks IS
    'Why a low-balance episode got no attempt when it asked for one: inserted by accounts_available_watch '
    'instead of the attempt. The outbox of recharge.blocked.';
COMMENT ON COLUMN recharge_blocks.next_eligible_at IS
    'When an attempt may be made again: the cooldown''s end, or the budget window''s.';
COMMENT ON COLUMN recharge_blocks.notice_enqueued_at IS 'When recharge.blocked was enqueued; NULL: still to enqueue.';
COMMENT ON CONSTRAINT recharge_blocks_pkey ON recharge_blocks IS
    'One recharge.blocked per (account, episode, reason): 10,000 debits blocked in one episode send one.';
COMMENT ON CONSTRAINT recharge_blocks_account_fk ON recharge_blocks IS 'Every block belongs to an existing account.';
COMMENT ON CONSTRAINT recharge_blocks_reason_check ON recharge_blocks IS 'cooling_down or budget_exhausted.';

CREATE INDEX recharge_blocks_outbox_idx ON recharge_blocks (account_id) WHERE notice_enqueued_at IS NULL;
COMMENT ON INDEX recharge_blocks_outbox_idx IS 'Finds the blocks whose recharge.blocked is still to enqueue.';

ALTER TABLE recharge_attempts
    ADD COLUMN retry             integer NOT NULL DEFAULT 0,
    ADD COLUMN decline_code      text,
    ADD COLUMN hard_decline      boolean NOT NULL GENERATED ALWAYS AS (coalesce(decline_code IN (
        'lost_card', 'stolen_card', 'expired_card', 'incorrect_number', 'do_not_honor', 'pickup_card', 'fraudulent'
    ), false)) STORED,
    ADD COLUMN retry_at          timestamptz,
    ADD COLUMN retry_enqueued_at timestamptz;
ALTER TABLE recharge_attempts
    DROP CONSTRAINT recharge_attempts_episode_key;
ALTER TABLE recharge_attempts
    ADD CONSTRAINT recharge_attempts_episode_key UNIQUE (account_id, episode, retry);
ALTER TABLE recharge_attempts
    ADD CONSTRAINT recharge_attempts_retry_check CHECK (retry BETWEEN 0 AND 3);
ALTER TABLE recharge_attempts
    ADD CONSTRAINT recharge_attempts_retry_at_check CHECK (
        (retry_at IS NULL OR (status = 'failed' AND NOT disabled_recharge))
        AND (retry_enqueued_at IS NULL OR retry_at IS NOT NULL)
    );

COMMENT ON COLUMN recharge_attempts.retry IS
    'Which try of its episode this is: 0 the first, 1..3 the failure ladder''s retries (1h, 6h, 24h).';
COMMENT ON COLUMN recharge_attempts.decline_code IS
    'The card''s decline: Stripe''s decline_code, or its error code when it has none (expired_card, incorrect_number).';
COMMENT ON COLUMN recharge_attempts.hard_decline IS
    'The decline says the card will never work (lost, stolen, expired, wrong number, do not honor, pick up, '
    'fraud): the failure forgets the card and stops recharge (payment_method_required), with no retry.';
COMMENT ON COLUMN recharge_attempts.retry_at IS
    'A soft failure that did not stop recharge: when the ladder''s next try of the episode is due (the '
    'backoff or the cooldown''s end, whichever is later).';
COMMENT ON COLUMN recharge_attempts.retry_enqueued_at IS
    'When the sweeper enqueued the River job of the retry (scheduled at retry_at); NULL: still to enqueue.';
COMMENT ON CONSTRAINT recharge_attempts_episode_key ON recharge_attempts IS
    'One attempt per low-balance episode and try: debits racing below the threshold insert nothing more '
    '(ON CONFLICT DO NOTHING); only the ladder''s job opens the next try.';
COMMENT ON CONSTRAINT recharge_attempts_retry_check ON recharge_attempts IS 'At most three retries per episode.';
COMMENT ON CONSTRAINT recharge_attempts_retry_at_check ON recharge_attempts IS
    'Only a failure that left recharge on schedules a retry, and a retry is enqueued only once scheduled.';

CREATE INDEX recharge_attempts_retry_outbox_idx ON recharge_attempts (id)
    WHERE retry_at IS NOT NULL AND retry_enqueued_at IS NULL;
COMMENT ON INDEX recharge_attempts_retry_outbox_idx IS 'Finds the failed attempts whose retry job is still to enqueue.';

-- The recharge status (SPEC §17), stored so that each of its changes is told once: why recharge does
-- or does not charge now.
ALTER TABLE accounts
    ADD COLUMN recharge_status                  text   NOT NULL DEFAULT 'off',
    ADD COLUMN recharge_status_next_eligible_at timestamptz,
    ADD COLUMN recharge_status_seq              bigint NOT NULL DEFAULT 0;
ALTER TABLE accounts
    ADD CONSTRAINT accounts_recharge_status_check CHECK (
        recharge_status IN ('ready', 'pending_attempt', 'cooling_down', 'budget_exhausted', 'requires_action',
                            'disabled_after_failures', 'payment_method_required', 'off')
        AND (recharge_status_next_eligible_at IS NULL OR recharge_status IN ('cooling_down', 'budget_exhausted'))
        AND recharge_status_seq >= 0
    );

COMMENT ON COLUMN accounts.recharge_status IS
    'The recharge status as recharge_status_compute gives it, moved by recharge_status_sync in the transaction '
    'that changes it; a cooling_down or budget_exhausted status whose time passed is moved by the sweep.';
COMMENT ON COLUMN accounts.recharge_status_next_eligible_at IS
    'When the stored cooling_down or budget_exhausted status ends (the sweep moves it then).';
COMMENT ON COLUMN accounts.recharge_status_seq IS
    'How many times the status changed: the number of its last recharge_status_changes row.';
COMMENT ON CONSTRAINT accounts_recharge_status_check ON accounts IS
    'A status of SPEC §17; only cooling_down and budget_exhausted end at a time.';

CREATE INDEX accounts_recharge_status_due_idx ON accounts (recharge_status_next_eligible_at)
    WHERE recharge_status IN ('cooling_down', 'budget_exhausted');
COMMENT ON INDEX accounts_recharge_status_due_idx IS 'Finds the statuses whose time has passed, for the sweep.';

-- One row per change of an account's recharge status: the outbox of its one recharge.status_changed.
CREATE TABLE recharge_status_changes (
    account_id         text        NOT NULL,
    seq                bigint      NOT NULL,
    from_status        text        NOT NULL,
    to_status          text        NOT NULL,
    reason             text        NOT NULL,
    next_eligible_at   timestamptz,
    changed_at         timestamptz NOT NULL DEFAULT now(),
    notice_enqueued_at timestamptz,
    CONSTRAINT recharge_status_changes_pkey PRIMARY KEY (account_id, seq),
    CONSTRAINT recharge_status_changes_account_fk FOREIGN KEY (account_id) REFERENCES accounts (id),
    CONSTRAINT recharge_status_changes_check CHECK (
        seq >= 1
        AND from_status <> to_status
        AND reason IN ('settings', 'attempt_requested', 'attempt_succeeded', 'attempt_failed',
                       'attempt_action_required', 'blocked', 'episode_ended', 'cooldown_ended', 'window_ended')
    )
);

COMMENT ON TABLE recharge_status_changes IS
    'Each change of accounts.recharge_status, numbered per account, inserted by recharge_status_sync with '
    'the change. The outbox of recharge.status_changed.';
COMMENT ON COLUMN recharge_status_changes.reason IS
    'What changed it: settings (a PUT), attempt_<status> (an attempt made or resolved), blocked (an attempt '
    'refused by the cooldown or the budget), episode_ended (available back at the threshold), '
    'cooldown_ended or window_ended (the sweep, on the database clock).';
COMMENT ON COLUMN recharge_status_changes.next_eligible_at IS 'When the new status ends, if it is one that ends.';
COMMENT ON COLUMN recharge_status_changes.notice_enqueued_at IS
    'When recharge.status_changed was enqueued; NULL: still to enqueue.';
COMMENT ON CONSTRAINT recharge_status_changes_pkey ON recharge_status_changes IS
    'One row, so one notification, per (account, transition number): two sweeps moving the same status '
    'cannot both record it (distributed by account_id on Citus).';
COMMENT ON CONSTRAINT recharge_status_changes_account_fk ON recharge_status_changes IS
    'Every change belongs to an existing account.';
COMMENT ON CONSTRAINT recharge_status_changes_check ON recharge_status_changes IS
    'Numbered from 1, a real change, for a known reason.';

CREATE INDEX recharge_status_changes_outbox_idx ON recharge_status_changes (account_id) WHERE notice_enqueued_at IS NULL;
COMMENT ON INDEX recharge_status_changes_outbox_idx IS 'Finds the changes whose notification is still to enqueue.';

-- The status derived from the rows that hold it, on the database clock. The tables are named by the
-- caller: the logical ones (the overload below), or on Citus, inside a trigger on a shard, the account's
-- colocated shards.
CREATE FUNCTION recharge_status_compute(account text, accounts_rel text, attempts_rel text, windows_rel text,
                                        blocks_rel text)
    RETURNS TABLE (status text, next_eligible_at timestamptz, window_start timestamptz, window_attempts integer,
                   window_recharged_amount bigint)
    LANGUAGE plpgsql STABLE AS
$$
BEGIN
    RETURN QUERY EXECUTE format($q$
        SELECT s.status,
               (CASE s.status
                    WHEN 'cooling_down' THEN greatest(s.next_eligible_at, s.retry_at)
                    WHEN 'budget_exhausted' THEN s.window_start + ('1 ' || s.recharge_budget_period)::interval
                END),
               s.window_start,
               s.window_attempts::integer,
               s.window_recharged_amount::bigint
        FROM (
            SELECT CASE
                       WHEN a.recharge_stopped IS NOT NULL THEN a.recharge_stopped
                       WHEN NOT a.recharge_enabled THEN 'off'
                       WHEN last.status = 'requested' THEN 'pending_attempt'
                       WHEN last.status = 'action_required' AND last.episode = a.recharge_episode THEN 'requires_action'
                       WHEN greatest(a.recharge_next_eligible_at, last.retry_at) > now() THEN 'cooling_down'
                       WHEN w.attempts >= a.recharge_budget_count
                            OR EXISTS (SELECT 1 FROM %4$s b
                                       WHERE b.account_id = a.id AND b.episode = a.recharge_episode
                                         AND b.reason = 'budget_exhausted' AND b.next_eligible_at > now()) THEN 'budget_exhausted'
                       ELSE 'ready'
                   END AS status,
                   a.recharge_next_eligible_at AS next_eligible_at,
                   last.retry_at,
                   a.recharge_budget_period,
                   date_trunc(a.recharge_budget_period, now(), 'UTC') AS window_start,
                   coalesce(w.attempts, 0) AS window_attempts,
                   coalesce(w.recharged_amount, 0) AS window_recharged_amount
            FROM %1$s a
            LEFT JOIN LATERAL (
                SELECT r.status, r.episode, r.retry_at FROM %2$s r WHERE r.account_id = a.id ORDER BY r.id DESC LIMIT 1
            ) last ON true
            LEFT JOIN %3$s w
                ON w.account_id = a.id
               AND w.period = a.recharge_budget_period
               AND w.window_start = date_trunc(a.recharge_budget_period, now(), 'UTC')
            WHERE a.id = $1
        ) s $q$, accounts_rel, attempts_rel, windows_rel, blocks_rel) USING account;
END;
$$;

CREATE FUNCTION recharge_status_compute(account text)
    RETURNS TABLE (status text, next_eligible_at timestamptz, window_start timestamptz, window_attempts integer,
                   window_recharged_amount bigint)
    LANGUAGE sql STABLE AS
$$
SELECT * FROM recharge_status_compute(account, 'accounts', 'recharge_attempts', 'recharge_windows', 'recharge_blocks')
$$;

COMMENT ON FUNCTION recharge_status_compute(text, text, text, text, text) IS
    'An account''s recharge status now (SPEC §17), from why it stopped, its newest attempt, its cooldown or '
    'pending retry and its budget window; next_eligible_at is when cooling_down or budget_exhausted ends. '
    'No row when the account does not exist. The one place the status is derived.';
COMMENT ON FUNCTION recharge_status_compute(text) IS 'recharge_status_compute on the logical tables.';

-- Moves the stored status to the computed one. The UPDATE is conditional on the transition number read
-- first, so of two transactions moving the same status (two sweeps) the second, which waited for the
-- first's row lock, updates nothing and records nothing. Every other caller holds the account's row lock
-- already. Returns whether it recorded a change.
CREATE FUNCTION recharge_status_sync(account text, reason text, accounts_rel text, attempts_rel text,
                                     windows_rel text, blocks_rel text, changes_rel text)
    RETURNS boolean
    LANGUAGE plpgsql AS
$$
DECLARE
    old_status text;
    old_next   timestamptz;
    old_seq    bigint;
    now_status text;
    now_next   timestamptz;
    n          bigint;
BEGIN
    EXECUTE format('SELECT recharge_status, recharge_status_next_eligible_at, recharge_status_seq FROM %s WHERE id = $1',
                   accounts_rel)
        INTO old_status, old_next, old_seq USING account;
    SELECT c.status, c.next_eligible_at INTO now_status, now_next
    FROM recharge_status_compute(account, accounts_rel, attempts_rel, windows_rel, blocks_rel) c;
    IF now_status IS NULL OR (now_status = old_status AND now_next IS NOT DISTINCT FROM old_next) THEN
        RETURN false;
    END IF;
    EXECUTE format('UPDATE %s SET recharge_status = $2, recharge_status_next_eligible_at = $3, '
                   '    recharge_status_seq = recharge_status_seq + CASE WHEN recharge_status = $2 THEN 0 ELSE 1 END '
                   'WHERE id = $1 AND recharge_status_seq = $4', accounts_rel)
        USING account, now_status, now_next, old_seq;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n = 0 OR now_status = old_status THEN
        -- Moved meanwhile by another transaction, or only the time of the same status changed.
        RETURN false;
    END IF;
    EXECUTE format('INSERT INTO %s (account_id, seq, from_status, to_status, reason, next_eligible_at) '
                   'VALUES ($1, $2, $3, $4, $5, $6)', changes_rel)
        USING account, old_seq + 1, old_status, now_status, reason, now_next;
    RETURN true;
END;
$$;

CREATE FUNCTION recharge_status_sync(account text, reason text)
    RETURNS boolean
    LANGUAGE sql AS
$$
SELECT recharge_status_sync(account, reason, 'accounts', 'recharge_attempts', 'recharge_windows', 'recharge_blocks',
                            'recharge_status_changes')
$$;

COMMENT ON FUNCTION recharge_status_sync(text, text, text, text, text, text, text) IS
    'Moves accounts.recharge_status to what recharge_status_compute gives now and records the change once '
    '(recharge_status_changes, numbered by recharge_status_seq), for the reason given. Called in the '
    'transaction of every change: accounts_available_watch, the PUT, an attempt''s resolution, the sweep.';
COMMENT ON FUNCTION recharge_status_sync(text, text) IS 'recharge_status_sync on the logical tables.';

-- The accounts that exist already start at the status their rows give.
UPDATE accounts a
SET recharge_status = c.status, recharge_status_next_eligible_at = c.next_eligible_at
FROM accounts x
CROSS JOIN LATERAL recharge_status_compute(x.id) c
WHERE x.id = a.id AND c.status <> 'off';

CREATE OR REPLACE FUNCTION accounts_available_watch() RETURNS trigger
    LANGUAGE plpgsql AS
$$
DECLARE
    a accounts;
    charge bigint;
    w_start timestamptz;
    admitted boolean;
    moved text;
BEGIN
    -- The account as the transaction leaves it (the trigger runs at commit; the row is locked by the
    -- update that queued it, so no other transaction makes an attempt for it meanwhile).
    SELECT * INTO a FROM accounts WHERE id = NEW.id;

    IF a.recharge_enabled AND a.balance - a.held < a.recharge_threshold
       AND NOT EXISTS (SELECT 1 FROM recharge_attempts r
                       WHERE r.account_id = a.id AND r.episode = a.recharge_episode AND r.retry = a.recharge_retry) THEN
        -- Below the threshold, and this try of the episode not made yet. fixed: the amount; target: what
        -- brings available (holds and debt counted) back to the target, at least Stripe's minimum charge.
        charge := CASE a.recharge_mode
                      WHEN 'fixed' THEN a.recharge_amount
                      ELSE greatest(a.recharge_target - (a.balance - a.held),
                                    CASE lower(a.currency)
                                        WHEN 'gbp' THEN 30 WHEN 'hkd' THEN 400 WHEN 'dkk' THEN 250
                                        WHEN 'nok' THEN 300 WHEN 'sek' THEN 300 WHEN 'czk' THEN 1500
                                        WHEN 'huf' THEN 17500 WHEN 'mxn' THEN 1000 WHEN 'thb' THEN 1000
                                        WHEN 'aed' THEN 200 WHEN 'pln' THEN 200 WHEN 'ron' THEN 200
                                        WHEN 'myr' THEN 200 WHEN 'bgn' THEN 100
                                        ELSE 50 END)
                  END;
        -- The cooldown: the attempt claims the time until the next one, if that time has come.
        UPDATE accounts
        SET recharge_next_eligible_at = now() + a.recharge_cooldown
        WHERE id = a.id
          AND (recharge_next_eligible_at IS NULL OR recharge_next_eligible_at <= now());
        admitted := FOUND;
        IF NOT admitted THEN
            INSERT INTO recharge_blocks (account_id, episode, reason, next_eligible_at)
            VALUES (a.id, a.recharge_episode, 'cooling_down', a.recharge_next_eligible_at)
            ON CONFLICT ON CONSTRAINT recharge_blocks_pkey DO NOTHING;
            moved := CASE WHEN FOUND THEN 'blocked' END;
        ELSIF a.recharge_budget_period IS NOT NULL THEN
            -- The budget: the window admits the attempt by a conditional upsert.
            w_start := date_trunc(a.recharge_budget_period, now(), 'UTC');
            INSERT INTO recharge_windows AS w
                (account_id, period, window_start, attempts, recharged_amount, max_attempts, max_amount)
            SELECT a.id, a.recharge_budget_period, w_start, 1, charge, a.recharge_budget_count, a.recharge_budget_amount
            WHERE charge <= coalesce(a.recharge_budget_amount, charge)
            ON CONFLICT ON CONSTRAINT recharge_windows_pkey DO UPDATE
            SET attempts = w.attempts + 1,
                recharged_amount = w.recharged_amount + excluded.recharged_amount,
                max_attempts = excluded.max_attempts,
                max_amount = excluded.max_amount
            WHERE w.attempts < coalesce(excluded.max_attempts, w.attempts + 1)
              AND w.recharged_amount + excluded.recharged_amount
                  <= coalesce(excluded.max_amount, w.recharged_amount + excluded.recharged_amount);
            admitted := FOUND;
            IF NOT admitted THEN
                -- Refused: no attempt, so the cooldown it claimed is given back.
                UPDATE accounts SET recharge_next_eligible_at = a.recharge_next_eligible_at WHERE id = a.id;
                INSERT INTO recharge_blocks (account_id, episode, reason, next_eligible_at)
                VALUES (a.id, a.recharge_episode, 'budget_exhausted',
                        w_start + ('1 ' || a.recharge_budget_period)::interval)
                ON CONFLICT ON CONSTRAINT recharge_blocks_pkey DO NOTHING;
                moved := CASE WHEN FOUND THEN 'blocked' END;
            END IF;
        END IF;
        IF admitted THEN
            -- The attempt and the pending order it owns.
            WITH attempt AS (
                INSERT INTO recharge_attempts (account_id, id, episode, retry, topup_id, amount)
                SELECT a.id, s.id, a.recharge_episode, a.recharge_retry, 'rch_' || s.id, charge
                FROM (SELECT nextval('recharge_attempts_id_seq') AS id) s
                RETURNING account_id, topup_id, amount
            )
            INSERT INTO topups (id, account_id, amount, currency)
            SELECT topup_id, account_id, amount, a.currency
            FROM attempt;
            moved := 'attempt_requested';
        END IF;
    ELSIF a.recharge_threshold IS NOT NULL AND a.balance - a.held >= a.recharge_threshold THEN
        -- Back at the threshold or above after an attempt or a block: the next dip is a new episode.
        UPDATE accounts
        SET recharge_episode = recharge_episode + 1, recharge_retry = 0
        WHERE id = a.id
          AND (EXISTS (SELECT 1 FROM recharge_attempts r WHERE r.account_id = a.id AND r.episode = a.recharge_episode)
               OR EXISTS (SELECT 1 FROM recharge_blocks b WHERE b.account_id = a.id AND b.episode = a.recharge_episode));
        moved := CASE WHEN FOUND THEN 'episode_ended' END;
    END IF;
    IF moved IS NOT NULL THEN
        -- An attempt, a block or a new episode: the status they change, told once.
        PERFORM recharge_status_sync(a.id, moved);
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
    'At commit, for an account whose balance, held or retry the transaction moved: below its recharge '
    'threshold with the episode''s current try not made, claims the cooldown and the budget window by '
    'conditional statements and inserts the attempt with its pending order, or records why not '
    '(recharge_blocks); at or above it after an attempt or block, starts the next episode; and moves the '
    'recharge status those change (recharge_status_sync). Likewise records balance.low / balance.recovered '
    'once per alert episode.';

-- Queued also when the failure ladder's job raises recharge_retry: the retry is made by the same rule,
-- budget and cooldown as a first attempt. Nothing else lowers it but a new episode, which queues nothing.
-- On a Citus cluster whose accounts are distributed already, Citus re-creates a trigger on the shards
-- only with enable_unsafe_triggers on (as the distribute step sets it); plain PostgreSQL keeps the setting
-- as an unused placeholder, for this transaction only.
SET LOCAL citus.enable_unsafe_triggers = on;
DROP TRIGGER accounts_available_watch ON accounts;
CREATE CONSTRAINT TRIGGER accounts_available_watch
    AFTER UPDATE ON accounts
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN ((NEW.recharge_enabled OR NEW.low_balance_alert IS NOT NULL)
          AND ((NEW.balance, NEW.held) IS DISTINCT FROM (OLD.balance, OLD.held) OR NEW.recharge_retry > OLD.recharge_retry))
    EXECUTE FUNCTION accounts_available_watch();

COMMENT ON TRIGGER accounts_available_watch ON accounts IS
    'Every debit moves accounts.balance or accounts.held with an UPDATE (ledger_chain_advance, holds), and '
    'the failure ladder raises accounts.recharge_retry, so auto-recharge and alerts happen in that '
    'transaction on every path without any path calling for them.';
COMMENT ON CONSTRAINT accounts_available_watch ON accounts IS
    'The constraint entry of the deferred trigger accounts_available_watch (a constraint trigger is what '
    'PostgreSQL can defer to commit).';
