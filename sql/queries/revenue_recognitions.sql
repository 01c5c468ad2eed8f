-- name: RevenueRecognitionsRowMismatches :many
-- Recognition rows that do not match their movement (verify): an amount other than the cost the lot's
-- drawn credits moved by (floor(cost_amount * drawn / amount) after less before; drawn_before is
-- drawn_after less the credits drawn, plus those given back for restored), drawn credits outside 0..the
-- lot's amount, a currency other than the lot's, a lot that cost nothing, or an entry that does not
-- exist or whose kind is not the row's (refund: refunded, dispute: disputed, expiry and void: breakage,
-- a restore: restored, any other debit: recognised). Empty when every row is what its draw booked.
SELECT r.account_id, r.lot_id, r.entry_id, r.posting_entry_id, r.kind, r.credits, r.drawn_after, r.amount,
       coalesce(e.kind, '')::text AS entry_kind,
       (abs(div(l.cost_amount::numeric * r.drawn_after, l.amount) - div(l.cost_amount::numeric * b.drawn_before, l.amount)))::bigint
           AS expected
FROM revenue_recognitions r
JOIN credit_lots l ON l.account_id = r.account_id AND l.id = r.lot_id
LEFT JOIN ledger e ON e.account_id = r.account_id AND e.id = r.entry_id
CROSS JOIN LATERAL (
    SELECT CASE WHEN r.kind = 'restored' THEN r.drawn_after + r.credits ELSE r.drawn_after - r.credits END AS drawn_before
) b
WHERE l.cost_amount = 0
   OR r.currency IS DISTINCT FROM l.cost_currency
   OR r.drawn_after > l.amount OR b.drawn_before > l.amount OR b.drawn_before < 0
   OR r.amount <> abs(div(l.cost_amount::numeric * r.drawn_after, l.amount) - div(l.cost_amount::numeric * b.drawn_before, l.amount))
   OR e.id IS NULL
   OR r.kind <> CASE
                    WHEN e.kind = 'refund' THEN 'refunded'
                    WHEN e.kind = 'dispute' THEN 'disputed'
                    WHEN e.kind IN ('expiry', 'void') THEN 'breakage'
                    WHEN e.kind IN ('refund_restore', 'dispute_won') THEN 'restored'
                    ELSE 'recognised'
                END
ORDER BY r.account_id, r.lot_id, r.entry_id, r.posting_entry_id
LIMIT 1000;

-- name: RevenueRecognitionsMovementMismatches :many
-- Movements of priced lots whose recognition rows do not add up to them (verify): per lot and entry,
-- the credits of its rows (less those restored) against its lot_draws (less its lot_refills). A draw
-- with no row, a row with no draw, or rows that count another number of credits are reported. Empty when
-- every movement of every priced lot is recognised once, for exactly what it moved.
SELECT coalesce(m.account_id, b.account_id)::text AS account_id, coalesce(m.lot_id, b.lot_id)::bigint AS lot_id,
       coalesce(m.entry_id, b.entry_id)::bigint AS entry_id,
       coalesce(m.credits, 0)::bigint AS moved, coalesce(b.credits, 0)::bigint AS booked
FROM (
    SELECT x.account_id, x.lot_id, x.entry_id, sum(x.credits) AS credits
    FROM (
        SELECT d.account_id, d.lot_id, d.entry_id, d.amount AS credits FROM lot_draws d
        UNION ALL
        SELECT f.account_id, f.lot_id, f.entry_id, -f.amount AS credits FROM lot_refills f
    ) x
    JOIN credit_lots l ON l.account_id = x.account_id AND l.id = x.lot_id
    WHERE l.cost_amount > 0
    GROUP BY x.account_id, x.lot_id, x.entry_id
) m
FULL JOIN (
    SELECT r.account_id, r.lot_id, r.entry_id,
           sum(CASE WHEN r.kind = 'restored' THEN -r.credits ELSE r.credits END) AS credits
    FROM revenue_recognitions r
    GROUP BY r.account_id, r.lot_id, r.entry_id
) b ON b.account_id = m.account_id AND b.lot_id = m.lot_id AND b.entry_id = m.entry_id
WHERE coalesce(m.credits, 0) <> coalesce(b.credits, 0)
ORDER BY 1, 2, 3
LIMIT 1000;

-- name: RevenueRecognitionsLotMismatches :many
-- Lots whose recognition rows, net (restored less), are not the cost their drawn credits have used up,
-- floor(cost_amount * (amount - remaining) / amount) (verify): a lot drawn to zero must have recognised
-- exactly its cost. Empty when every lot's rows sum to what its state says.
SELECT l.account_id, l.id AS lot_id, l.amount, l.remaining, l.cost_amount,
       coalesce(r.net, 0)::bigint AS recognised,
       div(l.cost_amount::numeric * (l.amount - l.remaining), l.amount)::bigint AS expected
FROM credit_lots l
LEFT JOIN (
    SELECT account_id, lot_id, sum(CASE WHEN kind = 'restored' THEN -amount ELSE amount END) AS net
    FROM revenue_recognitions
    GROUP BY account_id, lot_id
) r ON r.account_id = l.account_id AND r.lot_id = l.id
WHERE coalesce(r.net, 0) <> div(l.cost_amount::numeric * (l.amount - l.remaining), l.amount)
ORDER BY l.account_id, l.id
LIMIT 1000;

-- name: RevenueRollforward :many
-- Per cost currency, since the beginning: what lots were bought for (purchased), what their rows
-- recognised, broke, refunded, disputed and restored, and two closings that must agree (verify): the
-- deferred cost by the rollforward (purchased - recognised - breakage - refunded - disputed + restored,
-- from the rows), and the unrecognised cost of every open lot (from the lots' state alone).
SELECT c.currency::text AS currency,
       coalesce(p.purchased, 0)::bigint AS purchased,
       coalesce(r.recognised, 0)::bigint AS recognised, coalesce(r.breakage, 0)::bigint AS breakage,
       coalesce(r.refunded, 0)::bigint AS refunded, coalesce(r.disputed, 0)::bigint AS disputed,
       coalesce(r.restored, 0)::bigint AS restored,
       (coalesce(p.purchased, 0) - coalesce(r.recognised, 0) - coalesce(r.breakage, 0) - coalesce(r.refunded, 0)
        - coalesce(r.disputed, 0) + coalesce(r.restored, 0))::bigint AS closing,
       coalesce(p.deferred, 0)::bigint AS deferred
FROM (
    SELECT cost_currency AS currency FROM credit_lots WHERE cost_amount > 0
    UNION
    SELECT currency FROM revenue_recognitions
) c
LEFT JOIN (
    SELECT cost_currency AS currency, sum(cost_amount) AS purchased,
           sum(cost_amount - div(cost_amount::numeric * (amount - remaining), amount))
               FILTER (WHERE closed_at IS NULL) AS deferred
    FROM credit_lots
    WHERE cost_amount > 0
    GROUP BY cost_currency
) p ON p.currency = c.currency
LEFT JOIN (
    SELECT currency,
           sum(amount) FILTER (WHERE kind = 'recognised') AS recognised,
           sum(amount) FILTER (WHERE kind = 'breakage') AS breakage,
           sum(amount) FILTER (WHERE kind = 'refunded') AS refunded,
           sum(amount) FILTER (WHERE kind = 'disputed') AS disputed,
           sum(amount) FILTER (WHERE kind = 'restored') AS restored
    FROM revenue_recognitions
    GROUP BY currency
) r ON r.currency = c.currency
ORDER BY 1;
