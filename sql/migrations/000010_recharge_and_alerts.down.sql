DROP TRIGGER accounts_available_watch ON accounts;
DROP FUNCTION accounts_available_watch();
DROP TABLE balance_alerts;
DROP TABLE recharge_attempts;
ALTER TABLE topups DROP CONSTRAINT topups_account_id_key;
ALTER TABLE accounts
    DROP COLUMN stripe_customer,
    DROP COLUMN payment_method,
    DROP COLUMN recharge_enabled,
    DROP COLUMN recharge_threshold,
    DROP COLUMN recharge_amount,
    DROP COLUMN recharge_episode,
    DROP COLUMN recharge_failures,
    DROP COLUMN low_balance_alert,
    DROP COLUMN alert_episode;
