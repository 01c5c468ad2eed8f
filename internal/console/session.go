package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"time"
)

// Sessions are stateless: the cookie carries a random session id, its expiry and whether it logged
// in, signed with HMAC-SHA256 under a secret drawn when the process starts. It is unforgeable without
// that secret and never holds the API key. A restart draws a new secret and so ends every session.
//
// A visitor of the login page gets an anonymous session first, so that the login form carries a CSRF
// token like every other form; logging in replaces it with a new session (a new id: a session fixed
// before login is worth nothing after).

const (
	cookieName = "onceledger_console"
	cookiePath = "/console"
	// loginTTL bounds an anonymous session (the login form's); sessionTTL a logged-in one.
	loginTTL   = time.Hour
	sessionTTL = 8 * time.Hour
)

// session is what a valid cookie says.
type session struct {
	id            [16]byte
	expires       time.Time
	authenticated bool
}

// sessions signs and checks session cookies and their CSRF tokens.
type sessions struct {
	secret [32]byte
	now    func() time.Time
}

func newSessions() sessions {
	s := sessions{now: time.Now}
	rand.Read(s.secret[:]) // never fails (crypto/rand)
	return s
}

// payload: id (16 bytes) | expiry, Unix seconds (8) | authenticated (1).
const payloadSize = 16 + 8 + 1

func (s sessions) mac(purpose string, data []byte) []byte {
	m := hmac.New(sha256.New, s.secret[:])
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write(data)
	return m.Sum(nil)
}

// issue starts a new session and sets its cookie.
func (s sessions) issue(w http.ResponseWriter, r *http.Request, authenticated bool) session {
	sess := session{authenticated: authenticated}
	rand.Read(sess.id[:])
	ttl := loginTTL
	if authenticated {
		ttl = sessionTTL
	}
	sess.expires = s.now().Add(ttl).Truncate(time.Second)

	payload := make([]byte, payloadSize)
	copy(payload, sess.id[:])
	binary.BigEndian.PutUint64(payload[16:], uint64(sess.expires.Unix()))
	if authenticated {
		payload[24] = 1
	}
	value := append(payload, s.mac("session", payload)...)
	setCookie(w, r, base64.RawURLEncoding.EncodeToString(value), int(ttl.Seconds()))
	return sess
}

// read returns the request's session when its cookie is intact and unexpired.
func (s sessions) read(r *http.Request) (session, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, false
	}
	value, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || len(value) != payloadSize+sha256.Size {
		return session{}, false
	}
	payload, sig := value[:payloadSize], value[payloadSize:]
	if !hmac.Equal(sig, s.mac("session", payload)) {
		return session{}, false
	}
	var sess session
	copy(sess.id[:], payload)
	sess.expires = time.Unix(int64(binary.BigEndian.Uint64(payload[16:])), 0)
	sess.authenticated = payload[24] == 1
	if !s.now().Before(sess.expires) {
		return session{}, false
	}
	return sess, true
}

// csrfToken is the token every form of the session carries: bound to its id, so a token from another
// session (or none) is refused.
func (s sessions) csrfToken(sess session) string {
	return base64.RawURLEncoding.EncodeToString(s.mac("csrf", sess.id[:]))
}

func (s sessions) validCSRF(sess session, token string) bool {
	got, err := base64.RawURLEncoding.DecodeString(token)
	return err == nil && hmac.Equal(got, s.mac("csrf", sess.id[:]))
}

// end clears the cookie. The session itself cannot be revoked (nothing is stored): a copy of the
// cookie stays valid until it expires.
func (sessions) end(w http.ResponseWriter, r *http.Request) {
	setCookie(w, r, "", -1)
}

func setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: value, Path: cookiePath, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
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
