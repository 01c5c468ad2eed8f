-- The console's server-side sessions (console_sessions).

-- name: ConsoleSessionsInsert :exec
-- Starts a logged-in session that lasts at most lifetime_seconds on the database clock.
INSERT INTO console_sessions (id, key_name, expires_at)
VALUES (@id, @key_name, now() + make_interval(secs => @lifetime_seconds::double precision));

-- name: ConsoleSessionsTouch :one
-- The session's key name when it is alive (not revoked, not expired, seen within idle_seconds), and
-- marks it seen now; no row otherwise. One statement: two replicas touching a session at once both see
-- it alive or not, never half.
UPDATE console_sessions
SET last_seen_at = now()
WHERE id = @id
  AND revoked_at IS NULL
  AND expires_at > now()
  AND last_seen_at > now() - make_interval(secs => @idle_seconds::double precision)
RETURNING key_name;

-- name: ConsoleSessionsRevoke :exec
-- Ends a session at logout: from then on its cookie is refused by every replica.
UPDATE console_sessions
SET revoked_at = now()
WHERE id = @id
  AND revoked_at IS NULL;
