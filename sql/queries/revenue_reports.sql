-- name: RevenueTotalsBefore :many
-- The liability report's measures, cumulative, per currency and measure: everything dated before from_time
-- (the _from columns) and before to_time (the _to columns), money in the currency's minor units and the
-- credits it concerns split by the lots' category. One aggregation per source, each pushed down to the
-- shards on Citus, then summed: a handful of rows whatever the number of entries.
--   purchased: every lot, at its cost (0 for grants and promotional adjustments), dated by the lot.
--   recognised, breakage, refunded, disputed, restored: a priced lot's movements, as revenue_recognitions
--   booked them (money and credits), dated by the recognition; an unpriced lot's draws and refills
--   (credits only, money 0), by the entry's kind (a refill: restored), dated by the entry.
-- A lot without a cost currency (nothing was paid) counts in its account's currency.
SELECT t.currency::text AS currency, t.measure::text AS measure,
       coalesce(sum(t.amount_from), 0)::bigint AS amount_from,
       coalesce(sum(t.paid_from), 0)::bigint AS paid_from,
       coalesce(sum(t.promotional_from), 0)::bigint AS promotional_from,
       coalesce(sum(t.amount_to), 0)::bigint AS amount_to,
       coalesce(sum(t.paid_to), 0)::bigint AS paid_to,
       coalesce(sum(t.promotional_to), 0)::bigint AS promotional_to
FROM (
    SELECT coalesce(l.cost_currency, a.currency) AS currency, 'purchased' AS measure,
           sum(l.cost_amount) FILTER (WHERE l.created_at < @from_time) AS amount_from,
           sum(l.amount) FILTER (WHERE l.created_at < @from_time AND l.category = 'paid') AS paid_from,
           sum(l.amount) FILTER (WHERE l.created_at < @from_time AND l.category = 'promotional') AS promotional_from,
           sum(l.cost_amount) AS amount_to,
           sum(l.amount) FILTER (WHERE l.category = 'paid') AS paid_to,
           sum(l.amount) FILTER (WHERE l.category = 'promotional') AS promotional_to
    FROM credit_lots l
    JOIN accounts a ON a.id = l.account_id
    WHERE l.created_at < @to_time
    GROUP BY 1, 2
    UNION ALL
    SELECT r.currency, r.kind,
           sum(r.amount) FILTER (WHERE r.created_at < @from_time),
           sum(r.credits) FILTER (WHERE r.created_at < @from_time AND l.category = 'paid'),
           sum(r.credits) FILTER (WHERE r.created_at < @from_time AND l.category = 'promotional'),
           sum(r.amount),
           sum(r.credits) FILTER (WHERE l.category = 'paid'),
           sum(r.credits) FILTER (WHERE l.category = 'promotional')
    FROM revenue_recognitions r
    JOIN credit_lots l ON l.account_id = r.account_id AND l.id = r.lot_id
    WHERE r.created_at < @to_time
    GROUP BY 1, 2
    UNION ALL
    SELECT coalesce(l.cost_currency, a.currency),
           CASE WHEN m.refill THEN 'restored'
                WHEN e.kind IN ('expiry', 'void') THEN 'breakage'
                WHEN e.kind = 'refund' THEN 'refunded'
                WHEN e.kind = 'dispute' THEN 'disputed'
                ELSE 'recognised' END,
           0,
           sum(m.amount) FILTER (WHERE e.created_at < @from_time AND l.category = 'paid'),
           sum(m.amount) FILTER (WHERE e.created_at < @from_time AND l.category = 'promotional'),
           0,
           sum(m.amount) FILTER (WHERE l.category = 'paid'),
           sum(m.amount) FILTER (WHERE l.category = 'promotional')
    FROM (SELECT d.account_id, d.entry_id, d.lot_id, d.amount, false AS refill FROM lot_draws d
          UNION ALL
          SELECT f.account_id, f.entry_id, f.lot_id, f.amount, true FROM lot_refills f) m
    JOIN credit_lots l ON l.account_id = m.account_id AND l.id = m.lot_id
    JOIN ledger e ON e.account_id = m.account_id AND e.id = m.entry_id
    JOIN accounts a ON a.id = m.account_id
    WHERE l.cost_amount = 0
      AND e.created_at < @to_time
    GROUP BY 1, 2
) t
GROUP BY t.currency, t.measure
ORDER BY t.currency, t.measure;

-- name: RevenueJournalPage :many
-- One page of the journal from from_time (inclusive) to to_time (exclusive): every purchase (a lot that
-- cost money) and every recognition that moved money, in (created_at, account_id, lot_id, entry_id,
-- posting_entry_id) order after the previous page's last line (the after_ parameters; the zero time and
-- '' for the first page), at most max_rows. Each source is limited on its own first, so that on Citus
-- neither is gathered whole. restored says what it restored: the restoring entry's kind (refund_restore,
-- dispute_won).
SELECT j.created_at::timestamptz AS created_at, j.account_id::text AS account_id, j.lot_id::bigint AS lot_id,
       j.entry_id::bigint AS entry_id, j.posting_entry_id::bigint AS posting_entry_id, j.kind::text AS kind,
       j.amount::bigint AS amount, j.currency::text AS currency
FROM (
    (SELECT l.created_at, l.account_id, l.id AS lot_id, l.entry_id, l.entry_id AS posting_entry_id,
            'purchase' AS kind, l.cost_amount AS amount, l.cost_currency AS currency
     FROM credit_lots l
     WHERE l.cost_amount > 0
       AND l.created_at >= @from_time AND l.created_at < @to_time
       AND (l.created_at, l.account_id, l.id, l.entry_id, l.entry_id)
           > (@after_time::timestamptz, @after_account::text, @after_lot::bigint, @after_entry::bigint, @after_posting::bigint)
     ORDER BY l.created_at, l.account_id, l.id, l.entry_id
     LIMIT @max_rows)
    UNION ALL
    (SELECT r.created_at, r.account_id, r.lot_id, r.entry_id, r.posting_entry_id,
            CASE WHEN r.kind = 'restored' THEN e.kind ELSE r.kind END, r.amount, r.currency
     FROM revenue_recognitions r
     JOIN ledger e ON e.account_id = r.account_id AND e.id = r.entry_id
     WHERE r.amount > 0
       AND r.created_at >= @from_time AND r.created_at < @to_time
       AND (r.created_at, r.account_id, r.lot_id, r.entry_id, r.posting_entry_id)
           > (@after_time::timestamptz, @after_account::text, @after_lot::bigint, @after_entry::bigint, @after_posting::bigint)
     ORDER BY r.created_at, r.account_id, r.lot_id, r.entry_id, r.posting_entry_id
     LIMIT @max_rows)
) j
ORDER BY j.created_at, j.account_id, j.lot_id, j.entry_id, j.posting_entry_id
LIMIT @max_rows;
