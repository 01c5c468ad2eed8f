-- Three comments named migration files that the baseline folded in; they name the schema version instead,
-- which schema_migrations and `onceledger migrate version` show.
COMMENT ON COLUMN credit_lots.amount IS 'The credit the lot holds: its entry''s amount (for a restore, the part no reversal draw took it back to); for a lot made when a database came to schema version 9, the part of its credit still unspent then. Debt it repaid is among its lot_draws.';
COMMENT ON COLUMN credit_lots.cost_amount IS 'What was paid for the lot''s credit, in cost_currency''s minor units: a paid top-up''s price, an adjustment''s named cost; 0 for grants, promotional adjustments, restores beyond their reversal, and every lot made before schema version 24 (their price was never recorded with them). Recognised as the lot is drawn (revenue_recognitions).';
COMMENT ON COLUMN topups.credits IS 'What the order buys: the credit posted when it is paid (orders from before schema version 24: the amount).';
