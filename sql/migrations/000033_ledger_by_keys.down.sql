DROP FUNCTION IF EXISTS ledger_by_keys(text[]);
