COMMENT ON INDEX holds_captured_apart_idx IS
    'The holds captured through the API, apart from any decision: what billing looks up to charge a decision naming one only beyond its captured amount (SPEC §21).';
