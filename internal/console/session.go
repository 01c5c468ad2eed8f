package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"time"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/internal/access"
)

// Sessions are kept in the database (console_sessions), so that every replica sharing it knows them: the
// cookie carries a random token, the table its SHA-256 and the name of the key that logged in. A
// session ends at logout (revoked: a copy of the cookie is refused from then on, on every replica), after
// idleTimeout without a request, and sessionTTL after login, whichever comes first.
//
// A visitor of the login page gets an anonymous session first, so that the login form carries a CSRF
// token like every other form: a token in the cookie that is in no row. Logging in replaces it with a
// new token (a session fixed before login is worth nothing after). Every form's CSRF token is derived
// from the session's token (csrfToken), so it needs no secret of the process either.

const (
	cookieName = "onceledger_console"
	cookiePath = "/console"
	// loginTTL bounds an anonymous session's cookie (the login form's).
	loginTTL = time.Hour
	// sessionTTL is a logged-in session's absolute lifetime; idleTimeout ends it sooner when unused.
	sessionTTL  = 8 * time.Hour
	idleTimeout = 30 * time.Minute
	tokenSize   = 32
)

// session is what a request's cookie says, once checked against the table.
type session struct {
	token         [tokenSize]byte
	authenticated bool
	// keyName is the name of the API key that logged in: who the audit trail names.
	keyName string
}

// sessions issues and checks session cookies and their CSRF tokens.
type sessions struct {
	pool *db.Pool
	// keys are the API keys: a session lasts only while its key is one, with the operate scope.
	keys access.Keys
	// secure marks the cookie Secure: over TLS, and whenever the deployment says it is served over TLS
	// (config.Config.SecureCookies).
	secure bool
}

func (s sessions) id(sess session) []byte {
	id := sha256.Sum256(sess.token[:])
	return id[:]
}

// issueAnonymous starts an anonymous session (the login form's) and sets its cookie.
func (s sessions) issueAnonymous(w http.ResponseWriter, r *http.Request) session {
	var sess session
	rand.Read(sess.token[:]) // never fails (crypto/rand)
	s.setCookie(w, r, base64.RawURLEncoding.EncodeToString(sess.token[:]), int(loginTTL.Seconds()))
	return sess
}

// logIn starts a logged-in session of keyName, stored before its cookie is set.
func (s sessions) logIn(ctx context.Context, w http.ResponseWriter, r *http.Request, keyName string) error {
	sess := session{authenticated: true, keyName: keyName}
	rand.Read(sess.token[:])
	if err := db.StartConsoleSession(ctx, s.pool, s.id(sess), keyName, sessionTTL); err != nil {
		return err
	}
	s.setCookie(w, r, base64.RawURLEncoding.EncodeToString(sess.token[:]), int(sessionTTL.Seconds()))
	return nil
}

// read returns the request's session: logged in when its token is a live session's (which it marks
// seen) of a key still configured with the operate scope, anonymous otherwise; ok is false without a well-formed cookie.
func (s sessions) read(r *http.Request) (sess session, ok bool, err error) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, false, nil
	}
	token, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || len(token) != tokenSize {
		return session{}, false, nil
	}
	copy(sess.token[:], token)
	sess.keyName, sess.authenticated, err = db.TouchConsoleSession(r.Context(), s.pool, s.id(sess), idleTimeout)
	if key := s.keys.Named(sess.keyName); key == nil || !key.Scopes.Allows(access.Operate) {
		sess.authenticated = false // the key was removed, or lost its scope, since it logged in
	}
	return sess, true, err
}

// csrfToken is the token every form of the session carries: a hash of the session's token, so a token
// from another session (or none) is refused, and the page that shows it reveals no cookie.
func (s sessions) csrfToken(sess session) string {
	sum := sha256.Sum256(append([]byte("csrf\x00"), sess.token[:]...))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func (s sessions) validCSRF(sess session, token string) bool {
	return subtle.ConstantTimeCompare([]byte(token), []byte(s.csrfToken(sess))) == 1
}

// end revokes the session, on every replica, and clears the cookie.
func (s sessions) end(ctx context.Context, w http.ResponseWriter, r *http.Request, sess session) error {
	if err := db.RevokeConsoleSession(ctx, s.pool, s.id(sess)); err != nil {
		return err
	}
	s.setCookie(w, r, "", -1)
	return nil
}

func (s sessions) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: value, Path: cookiePath, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secure || r.TLS != nil,
	})
}

type sessionKey struct{}

func withSession(ctx context.Context, sess session) context.Context {
	return context.WithValue(ctx, sessionKey{}, sess)
}

// sessionOf is the request's session, as the session middleware found or started it.
func sessionOf(r *http.Request) (session, bool) {
	sess, ok := r.Context().Value(sessionKey{}).(session)
	return sess, ok
}
