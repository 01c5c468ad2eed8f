-- Credits with a price, and revenue recognised from the ledger (SPEC §19).
--
-- A top-up order buys `credits` for `amount` (the price, in the minor units of the order's currency): the
-- credit is exactly the credits, the lot it makes records what was paid for it (cost_amount in
-- cost_currency). Every movement of a priced lot (a debit's draw, an expiry or void, a refund or dispute
-- drawn from it, a restore refilling it) writes a revenue_recognitions row in the same statement that moves
-- the lot, by the same set-based allocation as its lot_draws (ledger_lots, lots_draw): the cost that
-- movement recognised, so that a lot drawn to zero has recognised exactly its cost, to the minor unit.
--
-- Each constraint is its own ALTER TABLE (Citus runs no ADD CONSTRAINT beside other subcommands on a
-- distributed table).

-- Accounts: the unit their balance counts.
ALTER TABLE accounts ADD COLUMN unit text NOT NULL DEFAULT 'currency';
ALTER TABLE accounts ADD CONSTRAINT accounts_unit_check CHECK (unit IN ('currency', 'credits'));
-- Recharge charges `recharge_amount` of the account's currency for as many units: only true 1:1.
ALTER TABLE accounts ADD CONSTRAINT accounts_recharge_unit_check CHECK (unit = 'currency' OR recharge_threshold IS NULL);

COMMENT ON COLUMN accounts.unit IS
    'What the balance counts: currency (the minor unit of the account''s currency; top-ups are paid in that '
    'currency) or credits (a unit of the product''s own; top-ups may be paid in any currency, at their order''s '
    'price). Chosen when the account is created.';
COMMENT ON CONSTRAINT accounts_unit_check ON accounts IS
    'An account counts currency (its currency''s minor unit) or credits.';
COMMENT ON CONSTRAINT accounts_recharge_unit_check ON accounts IS
    'Auto-recharge charges its amount in the account''s currency for as many units, which is a price only '
    'when the unit is that currency: an account counted in credits has no recharge settings (the API answers '
    '400), so that credits are never bought 1:1 by accident.';

-- Top-up orders: the credits they buy.
ALTER TABLE topups ADD COLUMN credits bigint;
UPDATE topups SET credits = amount;
ALTER TABLE topups ALTER COLUMN credits SET NOT NULL;
ALTER TABLE topups ADD CONSTRAINT topups_credits_positive_check CHECK (credits > 0);

COMMENT ON COLUMN topups.amount IS
    'The price: what the payment must be, in the minor units of currency. Paid exactly, or not at all.';
COMMENT ON COLUMN topups.credits IS
    'What the order buys: the credit posted when it is paid (orders before migration 000024: the amount).';
COMMENT ON CONSTRAINT topups_credits_positive_check ON topups IS
    'An order buys a positive number of credits.';

-- Ledger: the cost a credit's lot is to carry, beside its other lot terms (lot_category, ...). NOT VALID:
-- every existing entry has neither, and validating would scan the whole ledger under an exclusive lock.
ALTER TABLE ledger
    ADD COLUMN lot_cost_amount bigint,
    ADD COLUMN lot_cost_currency text;
ALTER TABLE ledger ADD CONSTRAINT ledger_lot_cost_check CHECK (
    (lot_cost_amount IS NULL AND lot_cost_currency IS NULL)
    OR (amount > 0 AND lot_cost_amount >= 0 AND lot_cost_currency ~ '^[a-z]{3}$')
) NOT VALID;

COMMENT ON COLUMN ledger.lot_cost_amount IS
    'For a credit: what was paid for it, in lot_cost_currency''s minor units (a paid top-up: its order''s '
    'price; an adjustment that names its cost); the lot it makes records it. NULL: nothing was paid (cost 0).';
COMMENT ON COLUMN ledger.lot_cost_currency IS
    'The currency of lot_cost_amount (lower case ISO 4217); NULL with it.';
COMMENT ON CONSTRAINT ledger_lot_cost_check ON ledger IS
    'A cost goes with a credit, both or neither: an amount >= 0 in a three-letter lower case currency.';

-- Lots: what they cost.
ALTER TABLE credit_lots
    ADD COLUMN cost_amount bigint NOT NULL DEFAULT 0,
    ADD COLUMN cost_currency text;
ALTER TABLE credit_lots ADD CONSTRAINT credit_lots_cost_check CHECK (cost_amount >= 0);
ALTER TABLE credit_lots ADD CONSTRAINT credit_lots_cost_currency_check
    CHECK (cost_currency ~ '^[a-z]{3}$');
ALTER TABLE credit_lots ADD CONSTRAINT credit_lots_cost_currency_present_check
    CHECK (cost_amount = 0 OR cost_currency IS NOT NULL);

COMMENT ON COLUMN credit_lots.cost_amount IS
    'What was paid for the lot''s credit, in cost_currency''s minor units: a paid top-up''s price, an '
    'adjustment''s named cost; 0 for grants, promotional adjustments, restores beyond their reversal, and '
    'every lot made before migration 000024 (their price was never recorded with them). Recognised as the '
    'lot is drawn (revenue_recognitions).';
COMMENT ON COLUMN credit_lots.cost_currency IS
    'The currency of cost_amount (lower case ISO 4217); NULL only when nothing was paid.';
COMMENT ON CONSTRAINT credit_lots_cost_check ON credit_lots IS
    'A lot costs 0 or more.';
COMMENT ON CONSTRAINT credit_lots_cost_currency_check ON credit_lots IS
    'A cost currency is three lower case letters.';
COMMENT ON CONSTRAINT credit_lots_cost_currency_present_check ON credit_lots IS
    'A lot that cost something says in which currency.';

-- Recognition rows.
CREATE TABLE revenue_recognitions (
    account_id       text        NOT NULL,
    lot_id           bigint      NOT NULL,
    entry_id         bigint      NOT NULL,
    posting_entry_id bigint      NOT NULL,
    kind             text        NOT NULL,
    credits          bigint      NOT NULL,
    drawn_after      bigint      NOT NULL,
    amount           bigint      NOT NULL,
    currency         text        NOT NULL,
    created_at       timestamptz NOT NULL,
    CONSTRAINT revenue_recognitions_pkey PRIMARY KEY (account_id, lot_id, entry_id, posting_entry_id),
    CONSTRAINT revenue_recognitions_lot_fk FOREIGN KEY (account_id, lot_id) REFERENCES credit_lots (account_id, id),
    CONSTRAINT revenue_recognitions_kind_check
        CHECK (kind IN ('recognised', 'breakage', 'refunded', 'disputed', 'restored')),
    CONSTRAINT revenue_recognitions_credits_positive_check CHECK (credits > 0),
    CONSTRAINT revenue_recognitions_drawn_after_check
        CHECK (drawn_after >= 0 AND (kind = 'restored' OR drawn_after >= credits)),
    CONSTRAINT revenue_recognitions_amount_check CHECK (amount >= 0),
    CONSTRAINT revenue_recognitions_currency_check CHECK (currency ~ '^[a-z]{3}$')
);

COMMENT ON TABLE revenue_recognitions IS
    'What each movement of a priced lot (cost_amount > 0) recognised of its cost, written with the movement '
    'by ledger_lots (lots_draw, lots_apply_entry) in the transaction of the entry. The lot''s drawn credits '
    '(amount - remaining) after a movement decide the cost recognised so far: floor(cost_amount * drawn / '
    'amount), so a lot drawn to zero has recognised exactly its cost (largest remainder, to the minor unit), '
    'and a row''s amount is the difference it made. Append-only (revenue_recognitions_append_only).';
COMMENT ON COLUMN revenue_recognitions.entry_id IS
    'The ledger entry that moved the lot: the debit that drew it (usage, capture, negative adjustment, '
    'refund, dispute, expiry, void) or the restore that refilled it.';
COMMENT ON COLUMN revenue_recognitions.posting_entry_id IS
    'The ledger entry whose posting wrote the row: entry_id itself, except for a debit that was debt when '
    'posted and drew this lot later (the credit or restore that repaid it). Its created_at is the row''s.';
COMMENT ON COLUMN revenue_recognitions.kind IS
    'recognised: a debit''s draw (usage, capture, negative adjustment), revenue earned; breakage: an expiry '
    'or void took the lot''s remaining, revenue of credits never used; refunded / disputed: a refund / '
    'dispute drew the lot, money given back; restored: a refund_restore or dispute_won refilled the lot, '
    'the reverse of refunded / disputed (the cost is deferred again).';
COMMENT ON COLUMN revenue_recognitions.credits IS
    'The credits the movement drew from the lot (restored: gave back to it).';
COMMENT ON COLUMN revenue_recognitions.drawn_after IS
    'The lot''s drawn credits (amount - remaining) right after the movement.';
COMMENT ON COLUMN revenue_recognitions.amount IS
    'The cost the movement recognised (restored: deferred again), in currency''s minor units: '
    'floor(cost * drawn_after / lot amount) - floor(cost * drawn_before / lot amount), drawn_before being '
    'drawn_after -/+ credits. Never negative; the kind says the direction.';
COMMENT ON COLUMN revenue_recognitions.currency IS
    'The lot''s cost_currency.';
COMMENT ON COLUMN revenue_recognitions.created_at IS
    'When it was recognised: the created_at of posting_entry_id.';
COMMENT ON CONSTRAINT revenue_recognitions_pkey ON revenue_recognitions IS
    'One row per lot, entry and posting (a debit repaid later may draw a lot it drew before, in another '
    'posting); the account leads (§15). A replayed entry is never posted again, so never recognised twice.';
COMMENT ON CONSTRAINT revenue_recognitions_lot_fk ON revenue_recognitions IS
    'A recognition is of an existing lot of the same account.';
COMMENT ON CONSTRAINT revenue_recognitions_kind_check ON revenue_recognitions IS
    'recognised, breakage, refunded, disputed or restored (see the column).';
COMMENT ON CONSTRAINT revenue_recognitions_credits_positive_check ON revenue_recognitions IS
    'A movement moves a positive number of credits.';
COMMENT ON CONSTRAINT revenue_recognitions_drawn_after_check ON revenue_recognitions IS
    'The lot''s drawn credits are never negative, before or after the movement.';
COMMENT ON CONSTRAINT revenue_recognitions_amount_check ON revenue_recognitions IS
    'An amount is never negative: the kind says which way the cost moved.';
COMMENT ON CONSTRAINT revenue_recognitions_currency_check ON revenue_recognitions IS
    'A currency is three lower case letters, the lot''s cost_currency.';

CREATE INDEX revenue_recognitions_created_idx ON revenue_recognitions (created_at);
COMMENT ON INDEX revenue_recognitions_created_idx IS
    'The recognitions of a period, across accounts (the liability report and the journal).';

CREATE FUNCTION revenue_recognitions_refuse_change() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    RAISE EXCEPTION 'revenue recognitions are append-only: % refused', TG_OP
        USING ERRCODE = 'restrict_violation',
              CONSTRAINT = 'revenue_recognitions_append_only',
              TABLE = 'revenue_recognitions',
              -- Citus relays a shard's error without its constraint and table fields, but with its detail.
              DETAIL = 'constraint revenue_recognitions_append_only on table revenue_recognitions';
END;
$$;

COMMENT ON FUNCTION revenue_recognitions_refuse_change() IS
    'Raises restrict_violation naming constraint revenue_recognitions_append_only for any UPDATE, DELETE or '
    'TRUNCATE of revenue_recognitions.';

CREATE TRIGGER revenue_recognitions_append_only
    BEFORE UPDATE OR DELETE ON revenue_recognitions
    FOR EACH ROW EXECUTE FUNCTION revenue_recognitions_refuse_change();

COMMENT ON TRIGGER revenue_recognitions_append_only ON revenue_recognitions IS
    'What was recognised stays as it was booked: a correction is a new movement (a restore, an adjustment).';

CREATE TRIGGER revenue_recognitions_no_truncate
    BEFORE TRUNCATE ON revenue_recognitions
    FOR EACH STATEMENT EXECUTE FUNCTION revenue_recognitions_refuse_change();

COMMENT ON TRIGGER revenue_recognitions_no_truncate ON revenue_recognitions IS
    'The recognitions cannot be emptied wholesale either.';
