-- The console's sessions, kept server-side so that every replica sharing the database knows them, a
-- logout revokes a copied cookie too, and a session ends after an idle while as well as at its absolute
-- expiry. The cookie holds a random token; the table holds only its SHA-256 (id), so a read of the table
-- yields no cookie. A session is alive while revoked_at is NULL, expires_at is ahead and last_seen_at is
-- recent enough; ConsoleSessionsTouch checks all three and moves last_seen_at in one statement.
--
-- Sessions belong to no account: on Citus the table is distributed by its own id (db/citus.go), like
-- stripe_events by event_id, and every statement names one id.
CREATE TABLE console_sessions (
    id           bytea       NOT NULL,
    key_name     text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    revoked_at   timestamptz,
    CONSTRAINT console_sessions_pkey PRIMARY KEY (id),
    CONSTRAINT console_sessions_id_check CHECK (octet_length(id) = 32),
    CONSTRAINT console_sessions_key_name_check CHECK (key_name <> ''),
    CONSTRAINT console_sessions_expiry_check CHECK (expires_at > created_at)
);

COMMENT ON TABLE console_sessions IS
    'Logged-in console sessions: alive while not revoked, not expired and not idle too long.';
COMMENT ON COLUMN console_sessions.id IS 'SHA-256 of the token the session cookie holds.';
COMMENT ON COLUMN console_sessions.key_name IS 'The name of the API key that logged in: the audit trail''s who.';
COMMENT ON COLUMN console_sessions.revoked_at IS 'When a logout ended the session; a copied cookie is refused from then on.';
COMMENT ON CONSTRAINT console_sessions_pkey ON console_sessions IS 'One row per session, found by its token''s hash.';
COMMENT ON CONSTRAINT console_sessions_id_check ON console_sessions IS 'The id is a SHA-256: the table holds no token.';
COMMENT ON CONSTRAINT console_sessions_key_name_check ON console_sessions IS 'Every session names the key that logged in.';
COMMENT ON CONSTRAINT console_sessions_expiry_check ON console_sessions IS 'A session expires after it starts.';
