// Package access is who may call what: the API keys of ONCELEDGER_API_KEYS, each with a name (what the
// audit trail records) and its scopes (what the routes of api/routes.go ask for).
package access

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
)

// Scope is a set of permissions, one bit each, so that a route's check is one AND.
type Scope uint8

const (
	// Read: every GET of /v1.
	Read Scope = 1 << iota
	// Spend: holds and their capture or void, decisions (what a product's backend does).
	Spend
	// Credit: what adds or removes money: adjustments, top-ups, account settings.
	Credit
	// Operate: what an operator does in an incident: replay, review, void a lot; and the console.
	Operate
	// Admin: everything, the audit trail too.
	Admin
)

// scopeNames spells the scopes as ONCELEDGER_API_KEYS and the audit trail do.
var scopeNames = []struct {
	scope Scope
	name  string
}{{Read, "read"}, {Spend, "spend"}, {Credit, "credit"}, {Operate, "operate"}, {Admin, "admin"}}

// Allows reports whether a key of scopes s may call a route that needs need: it holds need, or admin.
func (s Scope) Allows(need Scope) bool {
	return s&(need|Admin) != 0
}

func (s Scope) String() string {
	var names []string
	for _, n := range scopeNames {
		if s&n.scope != 0 {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, "+")
}

// MinSecretLength is the shortest secret accepted: 32 characters leave no room for guessing, even at
// the rate a listener can be asked.
const MinSecretLength = 32

// bareNameLength is how many characters of a bare secret (no name, no scopes) name its key.
const bareNameLength = 6

// Key is one configured API key. Its secret is kept only as a SHA-256 digest.
type Key struct {
	Name   string
	Scopes Scope
	digest [sha256.Size]byte
}

// Keys are the configured API keys.
type Keys []Key

// Parse reads the entries of ONCELEDGER_API_KEYS: `name:scope[+scope…]:secret`, or a bare `secret`, an
// admin key named after its first characters. Names are unique, so that the audit trail names one key.
func Parse(entries []string) (Keys, error) {
	var keys Keys
	var errs []error
	names := map[string]bool{}
	for i, entry := range entries {
		k, secret, err := parseEntry(entry)
		if err != nil {
			errs = append(errs, fmt.Errorf("ONCELEDGER_API_KEYS entry %d: %w", i+1, err))
			continue
		}
		if names[k.Name] {
			errs = append(errs, fmt.Errorf("ONCELEDGER_API_KEYS entry %d: the name %q is taken by another key", i+1, k.Name))
			continue
		}
		names[k.Name] = true
		k.digest = sha256.Sum256([]byte(secret))
		keys = append(keys, k)
	}
	return keys, errors.Join(errs...)
}

func parseEntry(entry string) (k Key, secret string, err error) {
	parts := strings.SplitN(entry, ":", 3)
	switch len(parts) {
	case 1:
		secret = parts[0]
		k = Key{Name: secret[:min(bareNameLength, len(secret))], Scopes: Admin}
	case 3:
		secret = parts[2]
		k.Name = parts[0]
		if !validName(k.Name) {
			return Key{}, "", fmt.Errorf("the name %q must be 1-64 characters of a-z, 0-9, _ and -", k.Name)
		}
		for _, name := range strings.Split(parts[1], "+") {
			s, ok := parseScope(name)
			if !ok {
				return Key{}, "", fmt.Errorf("key %s: unknown scope %q (read, spend, credit, operate or admin)", k.Name, name)
			}
			k.Scopes |= s
		}
	default:
		return Key{}, "", errors.New("an entry is name:scope[+scope…]:secret or a bare secret")
	}
	if len(secret) < MinSecretLength {
		return Key{}, "", fmt.Errorf("key %s: its secret has %d characters, fewer than %d", k.Name, len(secret), MinSecretLength)
	}
	return k, secret, nil
}

func parseScope(name string) (Scope, bool) {
	for _, n := range scopeNames {
		if n.name == name {
			return n.scope, true
		}
	}
	return 0, false
}

func validName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, c := range name {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// Match returns the key whose secret is secret, or nil. Every key is compared, in constant time, on
// SHA-256 digests (equal lengths), so neither the position nor the length of a configured secret leaks
// through timing. The API's bearer check and the console's login both ask it.
func (k Keys) Match(secret string) *Key {
	// Copied into a buffer on the stack, not converted: a conversion of more than 32 bytes allocates,
	// and every request of the hot routes asks.
	var buf [256]byte
	got := sha256.Sum256(append(buf[:0], secret...))
	found := -1
	for i := range k {
		if subtle.ConstantTimeCompare(got[:], k[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil
	}
	return &k[found]
}

// Named is the key named name, or nil: a session outlives no key removed from the configuration.
func (k Keys) Named(name string) *Key {
	for i := range k {
		if k[i].Name == name {
			return &k[i]
		}
	}
	return nil
}

// Secret is the secret of one ONCELEDGER_API_KEYS entry (what a client sends), named or bare.
func Secret(entry string) string {
	parts := strings.SplitN(strings.TrimSpace(entry), ":", 3)
	return parts[len(parts)-1]
}
