package api

import (
	"regexp"
	"strings"
	"testing"
)

// idPattern accepts exactly what the schema's format checks (accounts_id_format_check and its kin)
// accept, written as a regexp, at each length the API uses.
func FuzzIDPattern(f *testing.F) {
	for _, seed := range []string{"", "a", "acct_1", "A.b:c-d_9", "a b", "a/b", "é", "a\x00", strings.Repeat("x", 64),
		strings.Repeat("x", 65), strings.Repeat("y", 128), strings.Repeat("y", 129), strings.Repeat("z", 255),
		strings.Repeat("z", 256), "acct\n"} {
		f.Add(seed)
	}
	ids := map[int]*regexp.Regexp{
		64:  regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`),
		128: regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`),
		255: regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,255}$`),
	}
	f.Fuzz(func(t *testing.T, s string) {
		for max, re := range ids {
			if got, want := (idPattern{max: max}).MatchString(s), re.MatchString(s); got != want {
				t.Fatalf("idPattern{%d}.MatchString(%q) = %t, the schema's pattern says %t", max, s, got, want)
			}
		}
	})
}
