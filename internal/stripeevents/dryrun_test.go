package stripeevents_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/onceledger/onceledger/db"
	"github.com/onceledger/onceledger/db/dbtest"
	"github.com/onceledger/onceledger/internal/stripeevents"
)

// A dry run of an event that parks halfway (its second refund's key is taken by another entry) lists
// nothing: the first refund it posted was rolled back with the effects' savepoint, as in a replay. The
// ledger and the event stay as they were, and nothing the postings would trigger is left behind.
func TestDryRunOfAnEventThatParksPostsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	var onPosted int
	ledger := dbtest.Ledger(t, pool, db.LedgerConfig{OnPosted: func(context.Context, pgx.Tx, []db.Entry) error { onPosted++; return nil }})
	p := &stripeevents.Processor{Pool: pool, Ledger: ledger, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}

	if _, err := dbtest.Ledger(t, pool).CreateAccount(ctx, "acct_dry", "gbp", 0); err != nil {
		t.Fatal(err)
	}
	topup := `{"id":"evt_dry_paid","object":"event","type":"checkout.session.completed","api_version":"2024-06-20",
		"created":1700000000,"livemode":false,"data":{"object":{"id":"cs_dry","object":"checkout.session",
		"payment_status":"paid","amount_total":1000,"currency":"gbp","metadata":{"account_id":"acct_dry"},
		"payment_intent":"pi_dry"}}}`
	if res, err := p.Process(ctx, []byte(topup)); err != nil || !res.Credited {
		t.Fatalf("top-up: %+v, %v", res, err)
	}
	// re_dry_2's key already holds an entry of another amount: a conflict, which parks the event.
	err := db.InTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := ledger.Post(ctx, tx, db.Posting{AccountID: "acct_dry", Kind: db.KindRefund, Amount: -1,
			DedupeKey: "stripe:refund:re_dry_2", PaymentIntent: "pi_dry"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	refunded := `{"id":"evt_dry_refunded","object":"event","type":"charge.refunded","api_version":"2020-08-27",
		"created":1700000100,"livemode":false,"data":{"object":{"id":"ch_dry","object":"charge","amount":1000,
		"amount_refunded":500,"currency":"gbp","payment_intent":"pi_dry","metadata":{},
		"refunds":{"object":"list","has_more":false,"data":[
			{"id":"re_dry_1","object":"refund","amount":300,"currency":"gbp","status":"succeeded","payment_intent":"pi_dry","charge":"ch_dry"},
			{"id":"re_dry_2","object":"refund","amount":200,"currency":"gbp","status":"succeeded","payment_intent":"pi_dry","charge":"ch_dry"}]}}}}`
	if res, err := p.Process(ctx, []byte(refunded)); err != nil || res.Parked != stripeevents.ReasonDedupeConflict {
		t.Fatalf("refunds: %+v, %v; want parked dedupe_conflict", res, err)
	}
	before := onPosted

	dry, err := p.DryRun(ctx, "evt_dry_refunded")
	if err != nil {
		t.Fatal(err)
	}
	if dry.Result.Parked != stripeevents.ReasonDedupeConflict || len(dry.Entries) != 0 {
		t.Fatalf("dry run: %+v, want parked dedupe_conflict with no entries", dry)
	}
	if onPosted == before {
		t.Fatal("the dry run did not run the postings' side effects in its transaction")
	}
	acct, err := db.GetAccount(ctx, pool, "acct_dry")
	if err != nil {
		t.Fatal(err)
	}
	if acct.Balance != 999 {
		t.Fatalf("balance %d after the dry run, want 999", acct.Balance)
	}
	entries, err := db.Entries(ctx, pool, "acct_dry", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("%d entries after the dry run, want 2", len(entries))
	}
	if _, err := p.DryRun(ctx, "evt_never_received"); !errors.Is(err, db.ErrNotFound) {
		t.Fatalf("dry run of an unknown event: %v, want db.ErrNotFound", err)
	}
}
