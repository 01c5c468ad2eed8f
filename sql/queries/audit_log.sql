-- The audit trail (audit_log): appended to, listed, never changed.

-- name: AuditLogInsert :exec
-- Appends a group of records in one statement, the arrays read in lockstep.
INSERT INTO audit_log (account_id, key_name, action, target_id, status, outcome, remote_addr)
SELECT unnest(@account_ids::text[]), unnest(@key_names::text[]), unnest(@actions::text[]),
       unnest(@target_ids::text[]), unnest(@statuses::smallint[]), unnest(@outcomes::text[]),
       unnest(@remote_addrs::text[]);

-- name: AuditLogList :many
-- The newest records first, those before before_id (0: from the newest), at most limit_rows.
SELECT account_id, id, at, key_name, action, target_id, status, outcome, remote_addr
FROM audit_log
WHERE @before_id::bigint = 0 OR id < @before_id::bigint
ORDER BY id DESC
LIMIT @limit_rows::integer;
