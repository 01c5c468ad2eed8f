-- name: StripeDriftLock :exec
-- Serialises, until the transaction ends, the transactions that record drift passes: two passes over
-- overlapping windows (serve's and an operator's) that disagree while Stripe or the ledger moves would
-- otherwise record and resolve each other's rows in opposite orders, and deadlock. Recording is a few
-- statements, so waiting for it is short; no Stripe call is made under it.
SELECT pg_advisory_xact_lock(hashtextextended('onceledger.stripe_drift', 0));

-- name: StripeDriftRecord :execrows
-- Records the drift one pass found, set-based; the arrays are read in lockstep, one element per drift,
-- each (account_id, reason, object_id) at most once. A drift already recorded (stripe_drift_pkey) has
-- its row refreshed instead: what it says now, last_seen_at, and reopened if an earlier pass had
-- resolved it, so re-running a pass adds no row. An amount of 0 and an empty event id, payment or
-- currency stand for none (NULL): a Stripe amount is never 0, nor is the sum of a payment's credits.
INSERT INTO stripe_drift (account_id, reason, object_id, payment_intent, stripe_amount, ledger_amount, currency,
                          detail, event_id, object_created)
SELECT (@account_ids::text[])[i], (@reasons::text[])[i], (@object_ids::text[])[i],
       nullif((@payment_intents::text[])[i], ''), nullif((@stripe_amounts::bigint[])[i], 0),
       nullif((@ledger_amounts::bigint[])[i], 0), nullif((@currencies::text[])[i], ''), (@details::text[])[i],
       nullif((@event_ids::text[])[i], ''), (@object_created::timestamptz[])[i]
FROM generate_subscripts(@account_ids::text[], 1) AS i
ON CONFLICT (account_id, reason, object_id) DO UPDATE
SET payment_intent = excluded.payment_intent, stripe_amount = excluded.stripe_amount,
    ledger_amount = excluded.ledger_amount, currency = excluded.currency, detail = excluded.detail,
    event_id = excluded.event_id, object_created = excluded.object_created,
    -- The proposed row's own default, now(): Citus takes no function in DO UPDATE SET but immutable ones.
    last_seen_at = excluded.last_seen_at,
    resolved_at = NULL;

-- name: StripeDriftResolve :execrows
-- Resolves the open drift of the objects a pass checked (checked_ids) that the same pass did not find
-- again (the found arrays, in lockstep: what StripeDriftRecord was given): the pass saw them matched.
-- Drift of objects the pass did not look at stays open. Returns how many were resolved.
UPDATE stripe_drift d
SET resolved_at = now()
WHERE d.resolved_at IS NULL
  AND d.object_id = ANY(@checked_ids::text[])
  AND NOT EXISTS (
      SELECT 1
      FROM generate_subscripts(@found_account_ids::text[], 1) AS i
      WHERE (@found_account_ids::text[])[i] = d.account_id
        AND (@found_reasons::text[])[i] = d.reason
        AND (@found_object_ids::text[])[i] = d.object_id
  );

-- name: StripeDriftCheckpointInsert :execrows
-- Records that a window was clean. Returns 0 rows when the window already has its checkpoint
-- (stripe_drift_checkpoints_pkey): the first clean pass's stays, and a re-run adds nothing.
INSERT INTO stripe_drift_checkpoints (window_start, window_end, objects, credits, digest)
VALUES (@window_start, @window_end, @objects, @credits, @digest)
ON CONFLICT (window_start, window_end) DO NOTHING;

-- name: StripeDriftCheckpointGet :one
-- The checkpoint of one window. Returns no row when the window has none.
SELECT window_start, window_end, objects, credits, digest, created_at
FROM stripe_drift_checkpoints
WHERE window_start = @window_start
  AND window_end = @window_end;

-- name: StripeDriftCheckpointsList :many
-- The newest checkpoints first (by the window's end), at most max_rows.
SELECT window_start, window_end, objects, credits, digest, created_at
FROM stripe_drift_checkpoints
ORDER BY window_end DESC, window_start DESC
LIMIT @max_rows;

-- name: StripeDriftCheckpointsSince :many
-- The checkpoints of the windows starting at or after since: the scheduled pass skips those days.
SELECT window_start, window_end, objects, credits, digest, created_at
FROM stripe_drift_checkpoints
WHERE window_start >= @since
ORDER BY window_start;

-- name: StripeDriftOpen :many
-- The open drift, oldest found first, at most max_rows (stripe_drift_open_idx).
SELECT account_id, reason, object_id, payment_intent, stripe_amount, ledger_amount, currency, detail, event_id,
       object_created, found_at, last_seen_at, resolved_at
FROM stripe_drift
WHERE resolved_at IS NULL
ORDER BY found_at, account_id, reason, object_id
LIMIT @max_rows;

-- name: StripeDriftResolvedSince :many
-- The drift resolved at or after since, the latest first, at most max_rows.
SELECT account_id, reason, object_id, payment_intent, stripe_amount, ledger_amount, currency, detail, event_id,
       object_created, found_at, last_seen_at, resolved_at
FROM stripe_drift
WHERE resolved_at >= @since
ORDER BY resolved_at DESC, account_id, reason, object_id
LIMIT @max_rows;

-- name: StripeDriftOpenByReason :many
-- How much drift is open, per reason (the onceledger_stripe_drift gauge).
SELECT reason, count(*)::bigint AS open
FROM stripe_drift
WHERE resolved_at IS NULL
GROUP BY reason
ORDER BY reason;

-- name: StripeDriftCreditsBetween :many
-- The money-backed credits (topup, refund_restore, dispute_won) posted in [since, until), in posting
-- order, through ledger_credits_created_idx: what the pass matches to Stripe objects. (This and the next
-- read the ledger; they live here, with the pass they serve, since they write nothing.)
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at, seq, balance_after, subject, feature,
       on_behalf_of
FROM ledger
WHERE kind IN ('topup', 'refund_restore', 'dispute_won')
  AND created_at >= @since
  AND created_at < @until
ORDER BY id;

-- name: StripeDriftPaymentCredits :many
-- The topup credits of the given payments, through ledger_payment_intent_idx: a payment matches when it
-- has exactly one, of its amount.
SELECT id, account_id, kind, amount, description, dedupe_key, payment_intent, created_at, seq, balance_after, subject, feature,
       on_behalf_of
FROM ledger
WHERE payment_intent = ANY(@payment_intents::text[])
  AND kind = 'topup'
ORDER BY id;
