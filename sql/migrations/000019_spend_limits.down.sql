DROP TABLE spend_windows;
DROP TABLE spend_limits;
ALTER TABLE decisions DROP COLUMN subject, DROP COLUMN feature;
ALTER TABLE holds DROP COLUMN subject, DROP COLUMN feature, DROP COLUMN limit_ids, DROP COLUMN window_starts;
