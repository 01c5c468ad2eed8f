-- Holds reserve on their own account only again.
DROP TABLE hold_reservations;
DROP FUNCTION hold_reservations_append_only();
ALTER TABLE holds DROP COLUMN pooled;
