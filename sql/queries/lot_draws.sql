-- name: LotDrawsByEntries :many
-- The lots each of the entries drew from (the trigger ledger_lots writes them), for listing entries.
SELECT entry_id, lot_id, amount
FROM lot_draws
WHERE account_id = @account_id
  AND entry_id = ANY(@entry_ids::bigint[])
ORDER BY entry_id, lot_id;
