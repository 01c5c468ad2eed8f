DROP FUNCTION holds_resolution(timestamptz, timestamptz);
DROP FUNCTION claim_unique(text[], text[], text, text);
