DROP TABLE ledger;
DROP FUNCTION ledger_refuse_change();
DROP TABLE accounts;
