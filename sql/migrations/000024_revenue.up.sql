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

-- An order that names no credits buys its amount, 1:1: the recharge attempt's order, which
-- accounts_available_watch inserts in the account's currency (an account counted in credits has no
-- recharge, accounts_recharge_unit_check), and any writer that predates the column.
CREATE FUNCTION topups_credits_default() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    NEW.credits := coalesce(NEW.credits, NEW.amount);
    RETURN NEW;
END;
$$;

COMMENT ON FUNCTION topups_credits_default() IS
    'Before an order is inserted: credits not named are the amount (1:1).';

CREATE TRIGGER topups_credits_default
    BEFORE INSERT ON topups
    FOR EACH ROW EXECUTE FUNCTION topups_credits_default();

COMMENT ON TRIGGER topups_credits_default ON topups IS
    'An order that names no credits (a recharge attempt''s) buys its amount, 1:1.';

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

-- ledger_append gains p_lot_cost_amounts and p_lot_cost_currencies after p_features (stored on a credit as
-- lot_cost_amount, lot_cost_currency, which ledger_lots gives its lot); its result is 000023's. A new
-- signature needs a new function, hence DROP and CREATE; the rest of the function is 000023's.
DROP FUNCTION ledger_append(text[], text[], bigint[], text[], text[], text[], boolean[], bigint[], text[], text[], smallint[], text[], float8[], bigint, text[], text[]);

-- ledger_append: the one road (000023's, with the cost of a credit's lot). The arrays are one planned row each,
-- read in lockstep (those after the first five may be left out: NULL): the account, kind, amount,
-- description, dedupe key ('' or NULL: none), payment intent ('' or NULL: none), whether the row may not
-- take its account's balance below zero, the lot an expiry or void takes (0 or NULL: none), the key of
-- the reversal a restore undoes ('' or NULL: none), and for a credit (ignored for a debit) the terms of
-- its lot: category ('' or NULL: the default) and priority (NULL: the default), expiry as a timestamp
-- ('' or NULL: none) or else as a lifetime in seconds from the entry's created_at (0 or NULL: never);
-- after p_balance, who spent (subject) and on what (feature): those of the hold or decision the row is
-- posted for ('' or NULL: none); after p_features, what a credit's lot cost: its amount (NULL: 0) and
-- currency ('' or NULL: nothing was paid; the amount is then ignored).
CREATE FUNCTION ledger_append(
    p_account_ids     text[],
    p_kinds           text[],
    p_amounts         bigint[],
    p_descriptions    text[],
    p_dedupe_keys     text[],
    p_payment_intents text[]     DEFAULT NULL,
    p_no_overdraw     boolean[]  DEFAULT NULL,
    p_lot_ids         bigint[]   DEFAULT NULL,
    p_reverses        text[]     DEFAULT NULL,
    p_lot_categories  text[]     DEFAULT NULL,
    p_lot_priorities  smallint[] DEFAULT NULL,
    p_lot_expires_at  text[]     DEFAULT NULL,
    p_lot_ttls        float8[]   DEFAULT NULL,
    p_balance         bigint     DEFAULT NULL,
    p_subjects        text[]     DEFAULT NULL,
    p_features        text[]     DEFAULT NULL,
    p_lot_cost_amounts    bigint[] DEFAULT NULL,
    p_lot_cost_currencies text[]   DEFAULT NULL
)
    RETURNS TABLE (
        k bigint, id bigint, account_id text, kind text, amount bigint, description text, dedupe_key text,
        payment_intent text, seq bigint, balance_after bigint, created_at timestamptz, lot_id bigint,
        reverses_entry_id bigint, subject text, feature text
    )
    LANGUAGE plpgsql AS
$fn$
DECLARE
    locked_ids      text[];
    locked_seqs     bigint[];
    locked_balances bigint[];
    taken           text[];
    reversal_keys   text[];
    reversal_ids    bigint[];
    a_k             bigint[];
    a_accounts      text[];
    a_seqs          bigint[];
    a_balances      bigint[];
    a_keys          text[];
    claimed         text[];
    all_claimed     boolean;
    accounts        text[];
    batch           text[];
BEGIN
    -- 1. Lock the plan's accounts, in id order (with p_balance, only if the balance is still that).
    SELECT coalesce(array_agg(a.id ORDER BY a.id), '{}'), coalesce(array_agg(a.last_seq ORDER BY a.id), '{}'),
           coalesce(array_agg(a.balance ORDER BY a.id), '{}')
    INTO locked_ids, locked_seqs, locked_balances
    FROM accounts_lock(p_account_ids, p_balance) AS a;
    IF cardinality(locked_ids) = 0 THEN
        RETURN;
    END IF;

    -- 2. Under the locks: the keys entries hold already, and the reversals restores undo (read on their
    -- own, so that on Citus each is one distributed statement).
    taken := ARRAY(
        SELECT t FROM ledger_keys_taken(ARRAY(
            SELECT DISTINCT nullif(x, '') FROM unnest(p_dedupe_keys) AS x WHERE nullif(x, '') IS NOT NULL
        )) AS t
    );
    IF EXISTS (SELECT 1 FROM unnest(p_reverses) AS x WHERE nullif(x, '') IS NOT NULL) THEN
        SELECT coalesce(array_agg(r.dedupe_key), '{}'), coalesce(array_agg(r.id), '{}')
        INTO reversal_keys, reversal_ids
        FROM ledger r
        JOIN unnest(p_account_ids, p_reverses) AS x (account_id, key)
            ON r.account_id = x.account_id AND r.dedupe_key = x.key
        WHERE r.dedupe_key = ANY(p_reverses);
    END IF;

    -- 3. The plan: a row is inserted when its account is locked, its key (if any) is neither taken nor
    -- held by an earlier row of the plan, and no row of its account flagged no_overdraw would leave the
    -- balance below zero. Each account's rows are numbered from its last_seq in plan order, each with
    -- balance_after = balance + the running sum (a numeric: a balance beyond a bigint fails the cast,
    -- numeric_value_out_of_range, and with it the whole call).
    WITH plan AS (
        SELECT p.k, p.account_id, p.amount, nullif(p.dedupe_key, '') AS dedupe_key, coalesce(p.no_overdraw, false) AS no_overdraw,
               row_number() OVER (PARTITION BY nullif(p.dedupe_key, '') ORDER BY p.k) AS nth
        FROM unnest(p_account_ids, p_amounts, p_dedupe_keys, p_no_overdraw)
            WITH ORDINALITY AS p (account_id, amount, dedupe_key, no_overdraw, k)
    ), chained AS (
        SELECT p.k, p.account_id, p.dedupe_key, p.no_overdraw,
               a.last_seq + row_number() OVER w AS seq,
               a.balance + sum(p.amount::numeric) OVER w AS balance_after
        FROM plan p
        JOIN unnest(locked_ids, locked_seqs, locked_balances) AS a (id, last_seq, balance) ON a.id = p.account_id
        WHERE p.dedupe_key IS NULL OR (p.nth = 1 AND NOT p.dedupe_key = ANY(taken))
        WINDOW w AS (PARTITION BY p.account_id ORDER BY p.k ROWS UNBOUNDED PRECEDING)
    ), judged AS (
        -- A window, not NOT EXISTS over chained: from a session's sixth call plpgsql plans this statement
        -- generically, taking the arrays for a few rows, and the anti join became a nested loop, n * n for
        -- a billing chunk of n decisions.
        SELECT c.*, bool_or(c.no_overdraw AND c.balance_after < 0) OVER (PARTITION BY c.account_id) AS overdrawn
        FROM chained c
    )
    SELECT coalesce(array_agg(c.k ORDER BY c.account_id, c.seq), '{}'),
           coalesce(array_agg(c.account_id ORDER BY c.account_id, c.seq), '{}'),
           coalesce(array_agg(c.seq ORDER BY c.account_id, c.seq), '{}'),
           coalesce(array_agg(c.balance_after::bigint ORDER BY c.account_id, c.seq), '{}'),
           coalesce(array_agg(c.dedupe_key ORDER BY c.account_id, c.seq), '{}')
    INTO a_k, a_accounts, a_seqs, a_balances, a_keys
    FROM judged c
    WHERE NOT c.overdrawn;
    IF cardinality(a_k) = 0 THEN
        RETURN;
    END IF;

    -- 4. Claim the keys of the rows to insert (on Citus; on plain PostgreSQL the insert is checked by
    -- ledger_dedupe_idx). A key not claimed (a concurrent posting claimed it first) is not inserted.
    claimed := ARRAY(
        SELECT claim_keys(
            ARRAY(SELECT x FROM unnest(a_keys) AS x WHERE x IS NOT NULL),
            ARRAY(SELECT x.account_id FROM unnest(a_keys, a_accounts) AS x (key, account_id) WHERE x.key IS NOT NULL)
        )
    );
    -- Every key claimed (always on plain PostgreSQL): no row needs its key looked up in claimed.
    all_claimed := cardinality(claimed) = (SELECT count(*) FROM unnest(a_keys) AS x WHERE x IS NOT NULL);
    accounts := ARRAY(SELECT DISTINCT x FROM unnest(a_accounts) AS x ORDER BY x);

    -- 5. Insert, in each account's seq order, a batch of accounts at a time (ledger_batches: all at once on
    -- plain PostgreSQL). ON CONFLICT DO NOTHING: a key inserted meanwhile by a
    -- transaction this one waited for is skipped; if it was not its account's last row, the hole it leaves
    -- fails the statement in ledger_chain, so no wrong chain is ever left. (No arbiter is named: the key's
    -- index is ledger_dedupe_idx here and per account on Citus; the other unique keys, the id and
    -- (account_id, seq) under the account lock, cannot conflict, and a row they skipped would be missing
    -- from the answer and break the chain the same way.) created_at is taken per row under the lock, and a
    -- lot lifetime runs from it.
    FOR batch IN SELECT b FROM ledger_batches(accounts) AS b LOOP
    RETURN QUERY
    WITH planned AS (
        SELECT r.k, r.account_id, r.seq, r.balance_after, r.dedupe_key, clock_timestamp() AS at
        FROM unnest(a_k, a_accounts, a_seqs, a_balances, a_keys) AS r (k, account_id, seq, balance_after, dedupe_key)
        -- all_claimed and a batch of every account first: OR stops at them, and = ANY, a linear search
        -- of the array per row, runs only for the rows it must decide.
        WHERE (all_claimed OR r.dedupe_key IS NULL OR r.dedupe_key = ANY(claimed))
          AND (cardinality(batch) = cardinality(accounts) OR r.account_id = ANY(batch))
        ORDER BY r.account_id, r.seq
    ), inserted AS (
        INSERT INTO ledger AS l (account_id, kind, amount, description, dedupe_key, payment_intent, seq, balance_after,
                                 created_at, lot_id, reverses_entry_id, lot_category, lot_priority, lot_expires_at,
                                 subject, feature, lot_cost_amount, lot_cost_currency)
        SELECT r.account_id, p_kinds[r.k], p_amounts[r.k], coalesce(p_descriptions[r.k], ''), r.dedupe_key,
               nullif(p_payment_intents[r.k], ''), r.seq, r.balance_after, r.at, nullif(p_lot_ids[r.k], 0),
               reversal_ids[array_position(reversal_keys, nullif(p_reverses[r.k], ''))],
               -- Lot terms: a credit's only.
               CASE WHEN p_amounts[r.k] > 0 THEN nullif(p_lot_categories[r.k], '') END,
               CASE WHEN p_amounts[r.k] > 0 THEN p_lot_priorities[r.k] END,
               CASE WHEN p_amounts[r.k] > 0 THEN
                   coalesce(nullif(p_lot_expires_at[r.k], '')::timestamptz,
                            r.at + make_interval(secs => nullif(p_lot_ttls[r.k], 0)))
               END,
               nullif(p_subjects[r.k], ''), nullif(p_features[r.k], ''),
               -- A credit's cost: with a currency, or none at all (cost 0).
               CASE WHEN p_amounts[r.k] > 0 AND nullif(p_lot_cost_currencies[r.k], '') IS NOT NULL
                    THEN coalesce(p_lot_cost_amounts[r.k], 0) END,
               CASE WHEN p_amounts[r.k] > 0 THEN nullif(p_lot_cost_currencies[r.k], '') END
        FROM planned r
        ORDER BY r.account_id, r.seq
        ON CONFLICT DO NOTHING
        RETURNING l.id, l.account_id, l.kind, l.amount, l.description, l.dedupe_key, l.payment_intent, l.seq,
                  l.balance_after, l.created_at, l.lot_id, l.reverses_entry_id, l.subject, l.feature
    )
    SELECT r.k, i.id, i.account_id, i.kind, i.amount, i.description, i.dedupe_key, i.payment_intent, i.seq,
           i.balance_after, i.created_at, i.lot_id, i.reverses_entry_id, i.subject, i.feature
    FROM inserted i
    JOIN planned r ON r.account_id = i.account_id AND r.seq = i.seq
    ORDER BY i.account_id, i.seq;
    END LOOP;

    -- 6. A restore that refilled a lot that is closed or past its expiry (ledger_lots closed it): that
    -- credit goes at once, as an expiry, or as a void when the lot was closed before its time. Posted
    -- through this same road, keyed by lot and restore, and returned with k NULL.
    IF 'refund_restore' = ANY(p_kinds) OR 'dispute_won' = ANY(p_kinds) THEN
        RETURN QUERY
        SELECT NULL::bigint, g.id, g.account_id, g.kind, g.amount, g.description, g.dedupe_key, g.payment_intent,
               g.seq, g.balance_after, g.created_at, g.lot_id, g.reverses_entry_id, g.subject, g.feature
        FROM (
            SELECT array_agg(x.account_id ORDER BY x.account_id, x.seq, x.lot) AS accounts,
                   array_agg(x.kind ORDER BY x.account_id, x.seq, x.lot) AS kinds,
                   array_agg(-x.remaining ORDER BY x.account_id, x.seq, x.lot) AS amounts,
                   array_agg(x.kind || ' of lot ' || x.lot || ' refilled by entry ' || x.entry
                             ORDER BY x.account_id, x.seq, x.lot) AS descriptions,
                   array_agg(CASE x.kind WHEN 'expiry' THEN 'expire:' ELSE 'void:' END || x.lot || ':' || x.entry
                             ORDER BY x.account_id, x.seq, x.lot) AS keys,
                   array_agg(x.lot ORDER BY x.account_id, x.seq, x.lot) AS lots
            FROM (
                SELECT e.account_id, e.seq, e.id AS entry, l.id AS lot, l.remaining,
                       CASE WHEN l.expires_at <= e.created_at THEN 'expiry' ELSE 'void' END AS kind
                FROM ledger e
                JOIN lot_refills f ON f.account_id = e.account_id AND f.entry_id = e.id
                JOIN credit_lots l ON l.account_id = f.account_id AND l.id = f.lot_id
                JOIN unnest(a_accounts, a_seqs) AS n (account_id, seq) ON n.account_id = e.account_id AND n.seq = e.seq
                WHERE e.account_id = ANY(a_accounts)
                  AND e.kind IN ('refund_restore', 'dispute_won')
                  AND l.closed_at IS NOT NULL AND l.remaining > 0
            ) x
            HAVING count(*) > 0
        ) gone
        CROSS JOIN LATERAL ledger_append(gone.accounts, gone.kinds, gone.amounts, gone.descriptions, gone.keys,
                                         p_lot_ids => gone.lots) AS g;
    END IF;
END;
$fn$;

COMMENT ON FUNCTION ledger_append(text[], text[], bigint[], text[], text[], text[], boolean[], bigint[], text[], text[], smallint[], text[], float8[], bigint, text[], text[], bigint[], text[]) IS
    'The one road into the ledger: inserts planned entries (arrays in lockstep) after locking their accounts '
    'in id order, numbering each account''s rows from last_seq with balance_after from the locked balance, '
    'leaving out rows whose key is taken and the rows of an account whose no-overdraw row would go below zero, '
    'then posts the at-once expiry of any lot a restore refilled after it closed. Stores on each entry the '
    'subject and feature of the hold or decision it is posted for, and on a credit what its lot cost. Returns each inserted entry with the '
    'position (k) of its planned row; an entry it posted on its own (that expiry) has k NULL.';


-- Revenue recognition rides on the lot allocation (SPEC §19): lots_draw, which writes every draw of a
-- debit (billing's chunk in one call), writes in the same statement the recognition of each draw of a
-- priced lot; lots_apply_entry does so for the breakage of an expiry or void and for the restore of a
-- refill. The cost recognised by a lot so far is floor(cost_amount * drawn / amount), drawn = amount -
-- remaining, computed in numeric (no overflow); a movement's row is the difference it made, so that the
-- rows of a lot drawn to zero sum to exactly its cost, whatever the sizes and order of its draws.
-- lots_draw takes, per demand, the kind of the debit (refund, dispute: refunded, disputed; otherwise
-- recognised), the posting that draws (the debit itself, or the credit that repays a debt) and its time.
DROP FUNCTION lots_repay(text);
DROP FUNCTION lots_draw(text[], bigint[], bigint[], bigint[], bigint, boolean);

-- lots_draw allocates debits (or repaid debts) across the open lots of their accounts in draw order, in
-- one statement of running sums: the demands in seq order per account against the lots' remaining in
-- draw order, each overlap of the two running intervals a draw, and each draw of a priced lot a
-- recognition.
CREATE FUNCTION lots_draw(p_accounts text[], p_entries bigint[], p_seqs bigint[], p_needs bigint[], p_first_lot bigint,
                          p_repay boolean, p_kinds text[], p_postings bigint[], p_ats timestamptz[])
    RETURNS void
    LANGUAGE sql AS
$$
WITH demand AS (
    SELECT d.account_id, d.entry_id, d.seq, d.need,
           CASE d.kind WHEN 'refund' THEN 'refunded' WHEN 'dispute' THEN 'disputed' ELSE 'recognised' END AS recognition,
           d.posting, d.at,
           sum(d.need) OVER (PARTITION BY d.account_id ORDER BY d.seq ROWS UNBOUNDED PRECEDING) - d.need AS lo
    FROM unnest(p_accounts, p_entries, p_seqs, p_needs, p_kinds, p_postings, p_ats)
        AS d (account_id, entry_id, seq, need, kind, posting, at)
), totals AS (
    SELECT account_id, sum(need) AS total FROM demand GROUP BY account_id
), supply AS MATERIALIZED (
    -- Per account (a lateral: many small in-memory sorts, not one sort of every lot), and only the
    -- lots the demands reach: a chunk of usage rarely gets past the first.
    SELECT t.account_id, s.lot_id, s.remaining, s.lo, s.amount, s.cost_amount, s.cost_currency
    FROM totals t
    CROSS JOIN LATERAL (
        SELECT l.id AS lot_id, l.remaining, l.amount, l.cost_amount, l.cost_currency,
               sum(l.remaining) OVER (
                   ORDER BY coalesce(l.id = p_first_lot, false) DESC, l.priority, l.expires_at NULLS LAST,
                            l.category = 'paid', l.id
                   ROWS UNBOUNDED PRECEDING) - l.remaining AS lo
        FROM credit_lots l
        WHERE l.account_id = t.account_id AND l.closed_at IS NULL AND l.remaining > 0
    ) s
    WHERE s.lo < t.total
), draws AS MATERIALIZED (
    SELECT d.account_id, d.entry_id, s.lot_id,
           (least(d.lo + d.need, s.lo + s.remaining) - greatest(d.lo, s.lo))::bigint AS amount,
           d.lo AS demand_lo, d.recognition, d.posting, d.at,
           s.amount AS lot_amount, s.amount - s.remaining AS drawn_before, s.cost_amount, s.cost_currency
    FROM demand d
    JOIN supply s ON s.account_id = d.account_id AND s.lo < d.lo + d.need AND d.lo < s.lo + s.remaining
), drawn AS (
    -- New debits draw for the first time: a plain insert (billing's path).
    INSERT INTO lot_draws (account_id, entry_id, lot_id, amount)
    SELECT account_id, entry_id, lot_id, amount FROM draws WHERE NOT p_repay
), redrawn AS (
    -- A repaid debit may draw again from a lot it drew before (refilled since): add to that row.
    INSERT INTO lot_draws (account_id, entry_id, lot_id, amount)
    SELECT account_id, entry_id, lot_id, amount FROM draws WHERE p_repay
    ON CONFLICT (account_id, entry_id, lot_id) DO UPDATE SET amount = lot_draws.amount + excluded.amount
), recognised AS (
    -- Each draw of a priced lot, in the order the demands take the lot: the lot's drawn credits after
    -- it, and the cost that recognised.
    INSERT INTO revenue_recognitions (account_id, lot_id, entry_id, posting_entry_id, kind, credits, drawn_after,
                                      amount, currency, created_at)
    SELECT m.account_id, m.lot_id, m.entry_id, m.posting, m.recognition, m.amount, m.drawn_after,
           (div(m.cost_amount::numeric * m.drawn_after, m.lot_amount)
            - div(m.cost_amount::numeric * (m.drawn_after - m.amount), m.lot_amount))::bigint,
           m.cost_currency, m.at
    FROM (
        SELECT w.*, w.drawn_before + sum(w.amount) OVER (
                   PARTITION BY w.account_id, w.lot_id ORDER BY w.demand_lo ROWS UNBOUNDED PRECEDING) AS drawn_after
        FROM draws w
        WHERE w.cost_amount > 0
    ) m
), lots AS (
    UPDATE credit_lots l
    SET remaining = l.remaining - t.amount
    FROM (SELECT account_id, lot_id, sum(amount)::bigint AS amount FROM draws GROUP BY account_id, lot_id) t
    WHERE l.account_id = t.account_id AND l.id = t.lot_id
), uncovered AS MATERIALIZED (
    SELECT d.account_id, d.entry_id, d.seq, (d.need - coalesce(w.amount, 0))::bigint AS uncovered
    FROM demand d
    LEFT JOIN (SELECT account_id, entry_id, sum(amount) AS amount FROM draws GROUP BY account_id, entry_id) w
        ON w.account_id = d.account_id AND w.entry_id = d.entry_id
), owed AS (
    INSERT INTO lot_debts (account_id, entry_id, seq, uncovered)
    SELECT account_id, entry_id, seq, uncovered FROM uncovered WHERE uncovered > 0
    ON CONFLICT (account_id, entry_id) DO UPDATE SET uncovered = excluded.uncovered
)
DELETE FROM lot_debts x
USING uncovered u
WHERE u.uncovered = 0 AND x.account_id = u.account_id AND x.entry_id = u.entry_id;
$$;

COMMENT ON FUNCTION lots_draw(text[], bigint[], bigint[], bigint[], bigint, boolean, text[], bigint[], timestamptz[]) IS
    'Draws the demands (account, entry, seq, amount needed, the debit''s kind, the posting entry and its '
    'time; arrays in lockstep) from their accounts'' open lots in draw order (p_first_lot first, when given), '
    'set-based: lot_draws, the revenue_recognitions of priced lots, lots'' remaining, and lot_debts for what '
    'no lot covered. p_repay: the demands are debts already owed (their lot_debts rows are updated or '
    'deleted). Called by ledger_lots under the accounts'' row locks.';

-- lots_repay lets an account's debts draw its open lots, oldest debit first, in the posting of p_posting.
-- PL/pgSQL: on Citus, a join in an SQL function taking parameters cannot be planned.
CREATE FUNCTION lots_repay(p_account text, p_posting bigint, p_at timestamptz) RETURNS void
    LANGUAGE plpgsql AS
$$
BEGIN
    PERFORM lots_draw(array_agg(d.account_id), array_agg(d.entry_id), array_agg(d.seq), array_agg(d.uncovered), NULL,
                      true, array_agg(e.kind), array_agg(p_posting), array_agg(p_at))
    FROM lot_debts d
    JOIN ledger e ON e.account_id = d.account_id AND e.id = d.entry_id
    WHERE d.account_id = p_account AND e.account_id = p_account
    HAVING count(*) > 0;
END;
$$;

COMMENT ON FUNCTION lots_repay(text, bigint, timestamptz) IS
    'Repays an account''s debt from its open lots: each uncovered debit, oldest first, draws in draw order; '
    'what priced lots recognise is booked in the posting of p_posting (the credit or restore), at p_at.';

-- lots_apply_entry: 000012's, with the cost of a credit's lot and the recognitions of a priced lot's
-- breakage (expiry, void) and restores.
CREATE OR REPLACE FUNCTION lots_apply_entry(e ledger) RETURNS void
    LANGUAGE plpgsql AS
$$
DECLARE
    first_lot  bigint;
    refilled   bigint;
    rest       bigint;
    cancelled  bigint;
BEGIN
    CASE
    WHEN e.kind IN ('expiry', 'void') THEN
        -- Takes its lot's remaining and closes it: a priced lot books the rest of its cost as breakage.
        INSERT INTO lot_draws (account_id, entry_id, lot_id, amount)
        VALUES (e.account_id, e.id, e.lot_id, -e.amount);
        INSERT INTO revenue_recognitions (account_id, lot_id, entry_id, posting_entry_id, kind, credits, drawn_after,
                                          amount, currency, created_at)
        SELECT e.account_id, l.id, e.id, e.id, 'breakage', -e.amount, l.amount - l.remaining - e.amount,
               (div(l.cost_amount::numeric * (l.amount - l.remaining - e.amount), l.amount)
                - div(l.cost_amount::numeric * (l.amount - l.remaining), l.amount))::bigint,
               l.cost_currency, e.created_at
        FROM credit_lots l
        WHERE l.account_id = e.account_id AND l.id = e.lot_id AND l.cost_amount > 0;
        UPDATE credit_lots
        SET remaining = remaining + e.amount, closed_at = coalesce(closed_at, e.created_at)
        WHERE account_id = e.account_id AND id = e.lot_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'entry % takes lot % of account %, which does not exist', e.id, e.lot_id, e.account_id
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'lot_draws_lot_fk',
                      DETAIL = 'constraint lot_draws_lot_fk on table lot_draws';
        END IF;

    WHEN e.amount < 0 THEN
        -- A refund or dispute draws its own payment's lot first.
        first_lot := NULL;
        IF e.kind IN ('refund', 'dispute') AND e.payment_intent IS NOT NULL THEN
            SELECT l.id INTO first_lot
            FROM credit_lots l
            JOIN ledger c ON c.id = l.entry_id AND c.account_id = l.account_id
            WHERE l.account_id = e.account_id AND c.account_id = e.account_id
              AND c.kind = 'topup' AND c.payment_intent = e.payment_intent
            ORDER BY l.id
            LIMIT 1;
        END IF;
        PERFORM lots_draw(ARRAY[e.account_id], ARRAY[e.id], ARRAY[e.seq], ARRAY[-e.amount], first_lot, false,
                          ARRAY[e.kind], ARRAY[e.id], ARRAY[e.created_at]);

    WHEN e.kind IN ('refund_restore', 'dispute_won') THEN
        -- Refill the lots the reversal drew, amount for amount, up to the restore; a priced lot defers again
        -- the cost its refill un-draws (restored).
        WITH d AS (
            SELECT lot_id, amount,
                   sum(amount) OVER (ORDER BY lot_id ROWS UNBOUNDED PRECEDING) - amount AS lo
            FROM lot_draws
            WHERE account_id = e.account_id AND entry_id = e.reverses_entry_id
        ), refill AS (
            SELECT lot_id, least(amount, e.amount - lo)::bigint AS amount FROM d WHERE lo < e.amount
        ), recorded AS (
            INSERT INTO lot_refills (account_id, entry_id, lot_id, amount)
            SELECT e.account_id, e.id, lot_id, amount FROM refill
        ), restored AS (
            INSERT INTO revenue_recognitions (account_id, lot_id, entry_id, posting_entry_id, kind, credits, drawn_after,
                                              amount, currency, created_at)
            SELECT e.account_id, l.id, e.id, e.id, 'restored', r.amount, l.amount - l.remaining - r.amount,
                   (div(l.cost_amount::numeric * (l.amount - l.remaining), l.amount)
                    - div(l.cost_amount::numeric * (l.amount - l.remaining - r.amount), l.amount))::bigint,
                   l.cost_currency, e.created_at
            FROM refill r
            JOIN credit_lots l ON l.account_id = e.account_id AND l.id = r.lot_id
            WHERE l.cost_amount > 0
        ), moved AS (
            UPDATE credit_lots l
            SET remaining = l.remaining + r.amount
            FROM refill r
            WHERE l.account_id = e.account_id AND l.id = r.lot_id
        )
        SELECT coalesce(sum(amount), 0) INTO refilled FROM refill;
        -- What no lot gave: first the reversal's own debt, if still owed, then a new paid lot (costing
        -- nothing: no payment bought it).
        rest := e.amount - refilled;
        SELECT least(coalesce(max(uncovered), 0), rest) INTO cancelled
        FROM lot_debts
        WHERE account_id = e.account_id AND entry_id = e.reverses_entry_id;
        IF cancelled > 0 THEN
            UPDATE lot_debts SET uncovered = uncovered - cancelled
            WHERE account_id = e.account_id AND entry_id = e.reverses_entry_id AND uncovered > cancelled;
            DELETE FROM lot_debts WHERE account_id = e.account_id AND entry_id = e.reverses_entry_id AND uncovered = cancelled;
        END IF;
        IF rest - cancelled > 0 THEN
            INSERT INTO credit_lots (account_id, entry_id, category, amount, remaining, created_at)
            VALUES (e.account_id, e.id, 'paid', rest - cancelled, rest - cancelled, e.created_at);
        END IF;
        -- A refilled lot that is closed or past its expiry keeps what it got back out of reach (closed),
        -- until ledger_append posts its expiry right after this statement.
        UPDATE credit_lots l
        SET closed_at = coalesce(l.closed_at, e.created_at)
        FROM lot_refills f
        WHERE f.account_id = e.account_id AND f.entry_id = e.id
          AND l.account_id = e.account_id AND l.id = f.lot_id
          AND l.remaining > 0
          AND (l.closed_at IS NOT NULL OR l.expires_at <= e.created_at);
        PERFORM lots_repay(e.account_id, e.id, e.created_at);

    ELSE
        -- topup, grant, or a positive adjustment: a new lot, on the entry's terms and at its cost, which
        -- repays any debt first.
        INSERT INTO credit_lots (account_id, entry_id, category, priority, amount, remaining, expires_at, created_at,
                                 cost_amount, cost_currency)
        VALUES (e.account_id, e.id,
                coalesce(e.lot_category, CASE WHEN e.kind = 'topup' THEN 'paid' ELSE 'promotional' END),
                coalesce(e.lot_priority, 50), e.amount, e.amount, e.lot_expires_at, e.created_at,
                coalesce(e.lot_cost_amount, 0), e.lot_cost_currency);
        PERFORM lots_repay(e.account_id, e.id, e.created_at);
    END CASE;
END;
$$;

COMMENT ON FUNCTION lots_apply_entry(ledger) IS
    'One entry''s lot work, under its account''s lock: a credit makes its lot on the entry''s terms and cost (and '
    'repays debt), a debit draws in draw order (a refund or dispute its payment''s lot first), a restore refills '
    'what its reversal drew (closing a refilled lot that is closed or past its expiry), an expiry or void entry '
    'takes and closes its lot; every movement of a priced lot writes its revenue_recognitions row.';

CREATE OR REPLACE FUNCTION ledger_lots_apply() RETURNS trigger
    LANGUAGE plpgsql AS
$$
DECLARE
    e          ledger;
BEGIN
    -- A statement of plain debits (billing, usage, negative adjustments, captures): one allocation.
    IF NOT EXISTS (
        SELECT 1 FROM new_entries WHERE amount > 0 OR kind IN ('refund', 'dispute', 'expiry', 'void')
    ) THEN
        PERFORM lots_draw(array_agg(account_id), array_agg(id), array_agg(seq), array_agg(-amount), NULL, false,
                          array_agg(kind), array_agg(id), array_agg(created_at))
        FROM new_entries
        HAVING count(*) > 0;
        RETURN NULL;
    END IF;

    -- A statement of plain credits (top-ups, grants, positive adjustments; a group commit of them) on
    -- accounts without debt: one lot per credit, in one statement, since there is no debt to repay.
    IF NOT EXISTS (
        SELECT 1 FROM new_entries WHERE amount < 0 OR kind IN ('refund_restore', 'dispute_won')
    ) AND NOT EXISTS (
        SELECT 1 FROM lot_debts d WHERE d.account_id IN (SELECT account_id FROM new_entries)
    ) THEN
        INSERT INTO credit_lots (account_id, entry_id, category, priority, amount, remaining, expires_at, created_at,
                                 cost_amount, cost_currency)
        SELECT n.account_id, n.id,
               coalesce(n.lot_category, CASE WHEN n.kind = 'topup' THEN 'paid' ELSE 'promotional' END),
               coalesce(n.lot_priority, 50), n.amount, n.amount, n.lot_expires_at, n.created_at,
               coalesce(n.lot_cost_amount, 0), n.lot_cost_currency
        FROM new_entries n
        ORDER BY n.account_id, n.seq;
        RETURN NULL;
    END IF;

    -- Otherwise entry by entry, in each account's seq order; each step is itself set-based.
    FOR e IN SELECT * FROM new_entries ORDER BY account_id, seq LOOP
        PERFORM lots_apply_entry(e);
    END LOOP;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION ledger_lots_apply() IS
    'After each INSERT statement on the ledger (after ledger_chain): credits make lots on their terms and cost '
    '(and repay debt), debits draw lots in draw order, refunds and disputes their payment''s lot first, restores '
    'refill what their reversal drew, expiry and void entries take and close their lot, and every movement of '
    'a priced lot writes its revenue_recognitions row. Plain debits only: one set-based allocation for the '
    'whole statement; plain credits on accounts without debt: one insert of their lots.';
