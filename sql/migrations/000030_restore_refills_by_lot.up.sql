-- Restores refill their lots in statements of one account's rows each.
--
-- lots_apply_entry (000024's) refilled a restore's lots in one statement of data-modifying CTEs over a
-- CTE of the lots to refill. On Citus, where this function runs on a ledger shard (ledger_lots_apply,
-- sql/citus/prepare.sql), that statement is no single-shard query: Citus planned its CTE as a
-- distributed subplan and wrote its result, on every node, under the name {plan}_{subplan}, in the
-- directory of the distributed transaction. The plan numbers are counted per process, so a shard's
-- plan could take the name of a coordinator's subplan in the same transaction and replace its rows
-- (ledger_append's planned rows, read again after the insert: "row field count is 2, expected 6"). The
-- refills are now read by one query and written lot by lot, each statement on the account's rows alone:
-- on Citus a router statement, with no subplan. A priced lot's recognition (of a restore, and of an
-- expiry's or void's breakage) takes its account from the lot's row, the same account: so Citus runs the
-- INSERT ... SELECT where the lot is, instead of gathering its row on a coordinator first. The rule is
-- unchanged: the same lots, amounts and recognitions, in lot order.

CREATE OR REPLACE FUNCTION lots_apply_entry(e ledger) RETURNS void
    LANGUAGE plpgsql AS
$$
DECLARE
    first_lot  bigint;
    refilled   bigint;
    rest       bigint;
    cancelled  bigint;
    r          record;
BEGIN
    CASE
    WHEN e.kind IN ('expiry', 'void') THEN
        -- Takes its lot's remaining and closes it: a priced lot books the rest of its cost as breakage.
        INSERT INTO lot_draws (account_id, entry_id, lot_id, amount)
        VALUES (e.account_id, e.id, e.lot_id, -e.amount);
        INSERT INTO revenue_recognitions (account_id, lot_id, entry_id, posting_entry_id, kind, credits, drawn_after,
                                          amount, currency, created_at)
        SELECT l.account_id, l.id, e.id, e.id, 'breakage', -e.amount, l.amount - l.remaining - e.amount,
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
        -- Refill the lots the reversal drew, amount for amount, up to the restore, lot by lot in lot order;
        -- a priced lot defers again the cost its refill un-draws (restored), read before its refill.
        refilled := 0;
        FOR r IN
            SELECT d.lot_id, least(d.amount, e.amount - d.lo)::bigint AS amount
            FROM (
                SELECT lot_id, amount, sum(amount) OVER (ORDER BY lot_id ROWS UNBOUNDED PRECEDING) - amount AS lo
                FROM lot_draws
                WHERE account_id = e.account_id AND entry_id = e.reverses_entry_id
            ) d
            WHERE d.lo < e.amount
            ORDER BY d.lot_id
        LOOP
            INSERT INTO lot_refills (account_id, entry_id, lot_id, amount)
            VALUES (e.account_id, e.id, r.lot_id, r.amount);
            INSERT INTO revenue_recognitions (account_id, lot_id, entry_id, posting_entry_id, kind, credits, drawn_after,
                                              amount, currency, created_at)
            SELECT l.account_id, l.id, e.id, e.id, 'restored', r.amount, l.amount - l.remaining - r.amount,
                   (div(l.cost_amount::numeric * (l.amount - l.remaining), l.amount)
                    - div(l.cost_amount::numeric * (l.amount - l.remaining - r.amount), l.amount))::bigint,
                   l.cost_currency, e.created_at
            FROM credit_lots l
            WHERE l.account_id = e.account_id AND l.id = r.lot_id AND l.cost_amount > 0;
            UPDATE credit_lots
            SET remaining = remaining + r.amount
            WHERE account_id = e.account_id AND id = r.lot_id;
            refilled := refilled + r.amount;
        END LOOP;
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
