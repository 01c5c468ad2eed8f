package config_test

import (
	"testing"

	"github.com/onceledger/onceledger/config"
)

// The deployment's Stripe mode comes from the key's prefix or STRIPE_LIVEMODE; a contradiction
// refuses to start.
func TestLivemode(t *testing.T) {
	t.Parallel()
	live, test := true, false
	cases := []struct {
		key, setting string
		want         *bool
		wantErr      bool
	}{
		{"sk_live_x", "", &live, false},
		{"rk_live_x", "", &live, false},
		{"sk_test_x", "", &test, false},
		{"rk_test_x", "", &test, false},
		{"", "true", &live, false},
		{"", "false", &test, false},
		{"sk_test_x", "false", &test, false},
		{"", "", nil, false},
		{"sk_other", "", nil, false},
		{"sk_live_x", "false", nil, true},
		{"rk_test_x", "true", nil, true},
		{"", "yes", nil, true},
	}
	for _, c := range cases {
		cfg, err := config.Load(func(k string) string {
			return map[string]string{"STRIPE_SECRET_KEY": c.key, "STRIPE_LIVEMODE": c.setting}[k]
		})
		if (err != nil) != c.wantErr {
			t.Errorf("key %q, STRIPE_LIVEMODE %q: error %v", c.key, c.setting, err)
			continue
		}
		if c.wantErr {
			continue
		}
		if (cfg.Livemode == nil) != (c.want == nil) || (c.want != nil && *cfg.Livemode != *c.want) {
			t.Errorf("key %q, STRIPE_LIVEMODE %q: livemode %v, want %v", c.key, c.setting, cfg.Livemode, c.want)
		}
	}
}
