-- Holds on members reserve on their pools (SPEC §18). A hold on a member reserves what the member's own
-- available covers on the member, and the rest on its parent, then on its grandparent, in the
-- authorisation's transaction, with the tree locked roots first (accounts_lock). What each pool reserved
-- is a row of hold_reservations; holds.pooled is their sum, and the hold's own account reserved the rest
-- (amount - pooled). A hold on a root, or on a member whose own available covers it, reserves nothing on
-- a pool and writes no row here. Capture, void and expiry release exactly what was reserved, on every
-- level, in the transaction that moves the hold out of held; a capture posts its amount as the member's
-- part (what the member reserved) and each pool's part (what that pool reserved), in that order, each
-- under its own key. So, for every account, held = the sum of (amount - pooled) of its own holds still
-- held plus the reservations of its members' holds still held (`onceledger verify`, "held").
--
-- Citus: hold_reservations is distributed by account_id (the hold's account), colocated with holds, so
-- that a hold and its reservations are on one shard; each pool's row in accounts is updated where it is.
ALTER TABLE holds ADD COLUMN pooled bigint NOT NULL DEFAULT 0;
ALTER TABLE holds ADD CONSTRAINT holds_pooled_check CHECK (pooled >= 0 AND pooled <= amount);

COMMENT ON COLUMN holds.pooled IS
    'Of amount, what the hold reserved on its account''s pools (the sum of its hold_reservations); the '
    'account itself reserved amount - pooled. 0 for a hold on a root, or one the member''s own available '
    'covered. Written with the hold, never changed.';
COMMENT ON CONSTRAINT holds_pooled_check ON holds IS
    'A hold''s pools reserve none of it, or part of it, or all of it: never more than its amount.';

CREATE TABLE hold_reservations (
    account_id text   NOT NULL,
    hold_id    text   NOT NULL,
    pool_id    text   NOT NULL,
    amount     bigint NOT NULL,
    CONSTRAINT hold_reservations_pkey PRIMARY KEY (account_id, hold_id, pool_id),
    CONSTRAINT hold_reservations_hold_fk FOREIGN KEY (account_id, hold_id) REFERENCES holds (account_id, id),
    CONSTRAINT hold_reservations_amount_check CHECK (amount > 0),
    CONSTRAINT hold_reservations_pool_check CHECK (pool_id <> account_id)
);

COMMENT ON TABLE hold_reservations IS
    'What a pool reserved for a hold on one of its members (SPEC §18), written with the hold by '
    'HoldsReservePools and never changed or deleted (hold_reservations_append_only): whether it still '
    'counts in the pool''s held is the hold''s status. Keyed by the hold''s account, as holds are.';
COMMENT ON COLUMN hold_reservations.account_id IS 'The hold''s account: the member.';
COMMENT ON COLUMN hold_reservations.hold_id IS 'The hold, of account_id, that the pool reserved for.';
COMMENT ON COLUMN hold_reservations.pool_id IS
    'The pool that reserved: the member''s parent or grandparent (checked by HoldsReservePools under the '
    'tree''s locks, and by `onceledger verify`).';
COMMENT ON COLUMN hold_reservations.amount IS 'What the pool reserved, counted in its accounts.held while the hold is held.';
COMMENT ON CONSTRAINT hold_reservations_pkey ON hold_reservations IS
    'One reservation per hold and pool; the account first, so that the key holds on one shard on Citus (SPEC §15).';
COMMENT ON CONSTRAINT hold_reservations_hold_fk ON hold_reservations IS 'A reservation belongs to a hold of the same account.';
COMMENT ON CONSTRAINT hold_reservations_amount_check ON hold_reservations IS
    'A pool that reserves nothing for a hold has no row.';
COMMENT ON CONSTRAINT hold_reservations_pool_check ON hold_reservations IS
    'The hold''s own account is no pool of it: what it reserved itself is the hold''s amount - pooled.';

CREATE FUNCTION hold_reservations_append_only() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    RAISE EXCEPTION 'hold reservations are never changed: % refused', TG_OP
        USING ERRCODE = 'restrict_violation', CONSTRAINT = 'hold_reservations_append_only',
              TABLE = 'hold_reservations', DETAIL = 'constraint hold_reservations_append_only on table hold_reservations';
END;
$$;

CREATE TRIGGER hold_reservations_append_only
    BEFORE UPDATE OR DELETE ON hold_reservations
    FOR EACH ROW EXECUTE FUNCTION hold_reservations_append_only();

COMMENT ON FUNCTION hold_reservations_append_only() IS
    'Raises restrict_violation naming constraint hold_reservations_append_only for any UPDATE or DELETE.';
COMMENT ON TRIGGER hold_reservations_append_only ON hold_reservations IS
    'What a pool reserved for a hold is a fact of its authorisation: the hold''s status says whether it is released.';
