-- Back to 000023: lots, entries and orders lose their price, accounts their unit, and the recognitions go.

DROP TABLE revenue_recognitions;
DROP FUNCTION revenue_recognitions_refuse_change();

ALTER TABLE credit_lots
    DROP COLUMN cost_amount,
    DROP COLUMN cost_currency;

ALTER TABLE ledger
    DROP COLUMN lot_cost_amount,
    DROP COLUMN lot_cost_currency;

ALTER TABLE topups DROP COLUMN credits;
COMMENT ON COLUMN topups.amount IS NULL;

ALTER TABLE accounts DROP CONSTRAINT accounts_recharge_unit_check;
ALTER TABLE accounts DROP COLUMN unit;
