ALTER TABLE decisions DROP COLUMN hold_id;
DROP TABLE holds;
ALTER TABLE accounts DROP COLUMN held;
