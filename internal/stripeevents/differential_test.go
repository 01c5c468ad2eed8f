package stripeevents_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/stripeevents"
	"github.com/onceledger/onceledger/internal/stripefake"
)

// The happy path of a paid Checkout Session (one read, then PayCheckout's batch) is a fast path of the
// webhook: a seeded random stream of deliveries (sessions with and without an order, of another amount,
// on accounts that do not exist, redelivered, completed twice, payments refunded or disputed before and
// after they are recorded) gives, through it, exactly the results and the ledger the general path gives
// (the same processor with the happy path off). A failing seed is in the subtest's name.
func TestDifferentialCheckoutHappyPath(t *testing.T) {
	t.Parallel()
	for seed := range uint64(6) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			general, fast := dbtest.New(t), dbtest.New(t)
			processors := []*stripeevents.Processor{
				{Pool: general, Ledger: db.NewLedger(general, db.LedgerConfig{GeneralPathOnly: true}), Log: log},
				{Pool: fast, Ledger: dbtest.Ledger(t, fast), Log: log},
			}
			accounts := []string{"acct_a", "acct_b", "acct_missing"}
			for _, p := range processors {
				for _, a := range accounts[:2] {
					if _, err := p.Ledger.CreateAccount(ctx, a, "usd", 0); err != nil {
						t.Fatal(err)
					}
				}
			}

			rng := rand.New(rand.NewPCG(seed, 0xfa57))
			var sent [][]byte
			completed := map[string]bool{}
			for i := range 80 {
				session, pi := fmt.Sprintf("cs_%d", rng.IntN(40)), fmt.Sprintf("pi_%d", rng.IntN(40))
				account := accounts[rng.IntN(len(accounts))]
				amount := int64(100 * (1 + rng.IntN(5)))
				var event []byte
				switch r := rng.IntN(10); {
				case r < 5:
					completed[session] = true
					event = stripefake.Event(fmt.Sprintf("evt_%d", i), "checkout.session.completed", "2024-06-20", map[string]any{
						"id": session, "object": "checkout.session", "mode": "payment", "status": "complete",
						"payment_status": "paid", "amount_total": amount, "currency": "usd",
						"metadata": map[string]any{"account_id": account}, "payment_intent": pi,
					})
				case r < 6:
					// An order the API created for the session, before it completes.
					if completed[session] {
						continue
					}
					for _, p := range processors {
						if _, _, err := db.InsertPendingTopup(ctx, p.Pool, db.Topup{ID: "top_" + session, AccountID: account, Amount: amount, Currency: "usd"}); err == nil {
							if _, err := db.SetTopupSession(ctx, p.Pool, "top_"+session, session, "https://checkout.example/"+session); err != nil {
								t.Fatal(err)
							}
						}
					}
					continue
				case r < 8:
					event = stripefake.Event(fmt.Sprintf("evt_%d", i), "refund.created", "2024-06-20", map[string]any{
						"id": fmt.Sprintf("re_%d", i), "object": "refund", "amount": 1 + rng.IntN(100), "currency": "usd",
						"status": []string{"succeeded", "failed"}[rng.IntN(2)], "charge": "ch_" + pi, "payment_intent": pi,
						"metadata": map[string]any{},
					})
				case r < 9:
					event = stripefake.Event(fmt.Sprintf("evt_%d", i), "charge.dispute.created", "2024-06-20", map[string]any{
						"id": fmt.Sprintf("dp_%d", i), "object": "dispute", "amount": 1 + rng.IntN(100), "currency": "usd",
						"status": "needs_response", "charge": map[string]any{"id": "ch_" + pi, "metadata": map[string]any{}},
						"payment_intent": pi, "is_charge_refundable": false,
					})
				default:
					if len(sent) == 0 {
						continue
					}
					event = sent[rng.IntN(len(sent))] // a redelivery
				}
				sent = append(sent, event)
				var results [2]string
				for k, p := range processors {
					res, err := p.Process(ctx, event)
					results[k] = fmt.Sprintf("%+v %v", res, err)
				}
				if results[0] != results[1] {
					t.Fatalf("delivery %d:\n general: %s\n    fast: %s\n%s", i, results[0], results[1], event)
				}
			}
			dbtest.SameLedgers(t, dbtest.LedgerState(t, general), dbtest.LedgerState(t, fast))
		})
	}
}
