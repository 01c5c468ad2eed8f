DROP TABLE revenue_period_balances;
DROP TABLE revenue_periods;
DROP FUNCTION revenue_periods_refuse_change();
