-- Back to one attempt per episode: the retries of the ladder and the blocks are dropped with the
-- columns and tables that describe them (an episode with retries cannot keep its (account_id, episode)
-- key, so they are deleted first, with the pending orders only they own).
-- As in the up migration: Citus re-creates a trigger on distributed shards only with this on.
SET LOCAL citus.enable_unsafe_triggers = on;
DROP TRIGGER accounts_available_watch ON accounts;
DROP INDEX recharge_attempts_retry_outbox_idx;
DELETE FROM recharge_attempts WHERE retry > 0;
ALTER TABLE recharge_attempts
    DROP CONSTRAINT recharge_attempts_retry_at_check,
    DROP CONSTRAINT recharge_attempts_retry_check,
    DROP CONSTRAINT recharge_attempts_episode_key,
    ADD CONSTRAINT recharge_attempts_episode_key UNIQUE (account_id, episode),
    DROP COLUMN retry_enqueued_at,
    DROP COLUMN retry_at,
    DROP COLUMN hard_decline,
    DROP COLUMN decline_code,
    DROP COLUMN retry;
COMMENT ON CONSTRAINT recharge_attempts_episode_key ON recharge_attempts IS
    'One attempt per low-balance episode: debits racing below the threshold, or a second billing chunk '
    'in the same episode, insert nothing more (ON CONFLICT DO NOTHING).';
DROP FUNCTION recharge_status_sync(text, text);
DROP FUNCTION recharge_status_sync(text, text, text, text, text, text, text);
DROP FUNCTION recharge_status_compute(text);
DROP FUNCTION recharge_status_compute(text, text, text, text, text);
DROP TABLE recharge_status_changes;
DROP INDEX accounts_recharge_status_due_idx;
ALTER TABLE accounts
    DROP COLUMN recharge_status,
    DROP COLUMN recharge_status_next_eligible_at,
    DROP COLUMN recharge_status_seq;
DROP TABLE recharge_blocks;
DROP TABLE recharge_windows;
ALTER TABLE accounts
    DROP COLUMN recharge_budget_amount,
    DROP COLUMN recharge_budget_count,
    DROP COLUMN recharge_budget_period,
    DROP COLUMN recharge_cooldown,
    DROP COLUMN recharge_mode,
    DROP COLUMN recharge_target,
    DROP COLUMN recharge_next_eligible_at,
    DROP COLUMN recharge_retry,
    DROP COLUMN recharge_stopped;

-- The trigger and its function as migration 000010 made them.
CREATE OR REPLACE FUNCTION accounts_available_watch() RETURNS trigger
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
