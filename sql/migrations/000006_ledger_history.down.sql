-- Back to a ledger without history: the queries of the previous release move accounts.balance themselves.
DROP TRIGGER ledger_chain ON ledger;
DROP FUNCTION ledger_chain_advance();
DROP INDEX ledger_account_created_idx;
ALTER TABLE ledger DROP CONSTRAINT ledger_account_seq_key;
ALTER TABLE ledger DROP COLUMN balance_after, DROP COLUMN seq;
ALTER TABLE accounts DROP COLUMN last_seq;
ALTER TABLE ledger ALTER COLUMN created_at SET DEFAULT now();
COMMENT ON COLUMN accounts.balance IS
    'Cached sum of this account''s ledger entries, updated in the same transaction as each entry; '
    '`onceledger verify` checks it against the ledger.';
