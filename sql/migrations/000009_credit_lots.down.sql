-- Back to a ledger without lots. Fails (ledger_kind_sign_check) once expiry or void entries exist: the
-- ledger is append-only, and those entries mean nothing without lots.
DROP TRIGGER ledger_lots ON ledger;
DROP FUNCTION ledger_lots_apply();
DROP FUNCTION lots_apply_entry(ledger);
DROP FUNCTION lots_ttl(text);
DROP FUNCTION lots_repay(text);
DROP FUNCTION lots_draw(text[], bigint[], bigint[], bigint[], bigint, boolean);
DROP TABLE lot_terms, lot_debts, lot_refills, lot_draws, credit_lots;
ALTER TABLE ledger DROP CONSTRAINT ledger_kind_sign_check;
ALTER TABLE ledger ADD CONSTRAINT ledger_kind_sign_check CHECK (
    CASE kind
        WHEN 'topup'          THEN amount > 0
        WHEN 'grant'          THEN amount > 0
        WHEN 'refund_restore' THEN amount > 0
        WHEN 'dispute_won'    THEN amount > 0
        WHEN 'usage'          THEN amount < 0
        WHEN 'refund'         THEN amount < 0
        WHEN 'dispute'        THEN amount < 0
        WHEN 'adjustment'     THEN amount <> 0
        ELSE false
    END
);
COMMENT ON CONSTRAINT ledger_kind_sign_check ON ledger IS
    'Credits are positive and debits negative, per kind: topup, grant, refund_restore, dispute_won > 0; '
    'usage, refund, dispute < 0; adjustment non-zero. Any other kind is refused.';
