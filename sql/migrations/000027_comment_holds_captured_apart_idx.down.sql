COMMENT ON INDEX holds_captured_apart_idx IS NULL;
