-- onceledger's schema at version 31, the baseline: every table, function and trigger as it stands, in
-- one file that a DBA reads to know what the database promises. Every guarantee is a named object with
-- a COMMENT ON saying what it promises; docs/guarantees.md maps the triggers and what each may write.
--
-- Versions 1 to 31 built this schema step by step (their files are in the repository's history); this
-- file creates the same schema on an empty database, object for object (TestBaselineIsTheSchemaOfVersion31
-- holds it to the catalog those versions built). A database already at 31 has nothing to run here. One at
-- an earlier version is refused by `onceledger migrate up`: it goes to 31 with a build from before the
-- baseline first (docs/operating.md, "Upgrading from before the baseline"). No statement here changes:
-- later changes are new migrations numbered after 31.
--
-- Layout: each table with its comments, identity or sequence, keys, checks and indexes; then the
-- functions; then the triggers, table by table; then the foreign keys. The checks written NOT VALID were
-- added to tables that already held rows: they bind every new row all the same, and keep that form so
-- that a database created here is the database an upgraded one is.

-- ==== ledger ==============================================================================================
-- History (SPEC §10): every entry carries the balance it left, in a per-account order of its own. The chain
-- rule: within one account, in seq order (1, 2, 3, ...), balance_after = previous balance_after + amount (the
-- first entry: amount), and the last entry's balance_after is accounts.balance. seq and balance_after are
-- taken from the account row, which every posting path locks before it inserts the account's entries.
-- created_at is clock_timestamp(), the time the entry is inserted under that lock rather than its
-- transaction's start, so it grows with seq within an account. The database holds the chain (trigger
-- ledger_chain): no path can forget the cached balance or leave a hole.
--
-- The entry says what it does to the lots, so that no trigger parses its dedupe key or reads a side table:
-- lot_id names the lot an expiry or void takes, reverses_entry_id the reversal a restore undoes, and the
-- lot_* columns the lot a credit makes (the terms, and the lifetimes of paid and grant lots, travel with the
-- posting). subject and feature (in the formats of holds and decisions) let a statement, an export or a
-- query of the ledger alone attribute every debit without joining holds and decisions.
--
-- Cascades (SPEC §18): a debit on a member is paid by its own available first, then its parent's, then its
-- grandparent's, each account that pays posting its own entry through the one road (ledger_append). The
-- member's entry is under the effect's key (decision:{id}) and carries the member's part, 0 when its pools
-- paid it all, so that the member's statement shows every effect and a replay finds the effect's key taken;
-- each pool's entry is under {key}@{pool_id} and names the member it paid for in on_behalf_of.

CREATE TABLE ledger (
    id bigint NOT NULL,
    account_id text NOT NULL,
    kind text NOT NULL,
    amount bigint NOT NULL,
    description text DEFAULT ''::text NOT NULL,
    dedupe_key text,
    payment_intent text,
    created_at timestamptz DEFAULT clock_timestamp() NOT NULL,
    seq bigint NOT NULL,
    balance_after bigint NOT NULL,
    lot_id bigint,
    reverses_entry_id bigint,
    lot_category text,
    lot_priority smallint,
    lot_expires_at timestamptz,
    subject text,
    feature text,
    lot_cost_amount bigint,
    lot_cost_currency text,
    on_behalf_of text,
    CONSTRAINT ledger_lot_id_check CHECK (((kind = ANY (ARRAY['expiry'::text, 'void'::text])) = (lot_id IS NOT NULL))),
    CONSTRAINT ledger_lot_terms_check CHECK ((((lot_category IS NULL) AND (lot_priority IS NULL) AND (lot_expires_at IS NULL)) OR ((amount > 0) AND COALESCE((lot_category = ANY (ARRAY['paid'::text, 'promotional'::text])), true) AND COALESCE(((lot_priority >= 0) AND (lot_priority <= 100)), true)))),
    CONSTRAINT ledger_reverses_check CHECK (((reverses_entry_id IS NULL) OR (kind = ANY (ARRAY['refund_restore'::text, 'dispute_won'::text]))))
);
-- The planner is told that an account's entries are never unique to it: two an account at the least.
-- ANALYZE calls a column unique (n_distinct = -1) when no value repeats in its sample; a young ledger, every
-- account with its first top-up and nothing more, reads that way, and the planner would then expect one entry
-- per account however far the ledger grows until the next ANALYZE. The statements that find an entry by its
-- key name its account too (so that Citus runs them on the account's shard): billing's probe of each
-- decision (DecisionsUnbilledByAccount, account_id = ... AND dedupe_key = 'decision:' || ...), a hold's
-- capture, a spend window's decisions. Expecting one entry per account, the planner costs such a probe the
-- same through an index of the account as through ledger_dedupe_idx and takes the account's: a scan of every
-- entry of the account for each decision, which the billing pass itself makes longer (measured: a first pass
-- over accounts of one entry each ran at 0.29x of the same pass without the lots trigger, one over five
-- entries each at 0.78x; docs/performance.md). At two entries an account or more the unique key is the
-- cheaper probe, whatever ANALYZE finds. A ledger in use is never unique per account; in one that has grown
-- the estimate stays below what ANALYZE would find and weighs the same indexes against each other.
-- On Citus the option is not handed on to the shards by Citus itself: the distribute step of every
-- `migrate up` gives each shard the column options of its table (db/citus.go).
ALTER TABLE ONLY ledger ALTER COLUMN account_id SET (n_distinct=-0.5);

COMMENT ON TABLE ledger IS 'Append-only journal of every money movement. A row is never updated or deleted (ledger_append_only).';

COMMENT ON COLUMN ledger.dedupe_key IS 'Names the effect this entry is ("stripe:refund:re_..."). At most one entry per key (ledger_dedupe_idx).';

COMMENT ON COLUMN ledger.payment_intent IS 'The Stripe payment_intent a topup, refund or dispute entry belongs to; verify checks that the reversals of one payment never exceed its credit.';

COMMENT ON COLUMN ledger.seq IS 'Position of the entry within its account: 1, 2, 3, ... without holes, taken from accounts.last_seq under the account''s row lock. The chain follows seq, not the global id (not ordered per account once sharded).';

COMMENT ON COLUMN ledger.balance_after IS 'The account''s balance right after this entry: previous balance_after + amount, in seq order (the first entry: amount). Held by ledger_chain_advance and checked by verify.';

COMMENT ON COLUMN ledger.lot_id IS 'For an expiry or void entry: the lot whose remaining it takes (and ledger_lots closes).';

COMMENT ON COLUMN ledger.reverses_entry_id IS 'For a restore (refund_restore, dispute_won): the reversal it undoes, whose lot draws ledger_lots refills.';

COMMENT ON COLUMN ledger.lot_category IS 'For a credit: the category of the lot it makes, when the posting chose one (default: paid for top-ups, promotional otherwise).';

COMMENT ON COLUMN ledger.lot_priority IS 'For a credit: the priority of the lot it makes (default 50).';

COMMENT ON COLUMN ledger.lot_expires_at IS 'For a credit: when the lot it makes expires (the posting''s own time, or the configured lifetime of paid and grant lots from the entry''s created_at); NULL: never.';

COMMENT ON COLUMN ledger.subject IS 'Who the entry was spent for: the subject of the hold or decision it was posted for (or of the adjustment that named one); NULL: nobody named.';

COMMENT ON COLUMN ledger.feature IS 'What the entry was spent on: the feature of the hold or decision it was posted for (or of the adjustment that named one); NULL: nothing named.';

COMMENT ON COLUMN ledger.lot_cost_amount IS 'For a credit: what was paid for it, in lot_cost_currency''s minor units (a paid top-up: its order''s price; an adjustment that names its cost); the lot it makes records it. NULL: nothing was paid (cost 0).';

COMMENT ON COLUMN ledger.lot_cost_currency IS 'The currency of lot_cost_amount (lower case ISO 4217); NULL with it.';

COMMENT ON COLUMN ledger.on_behalf_of IS 'For a pool''s part of a member''s debit: the member it paid for (the entry''s key is the member''s, decision:{id}, with @{pool_id} appended); NULL: the account paid for itself.';

COMMENT ON CONSTRAINT ledger_lot_id_check ON ledger IS 'Exactly the expiry and void entries name the lot they take.';

COMMENT ON CONSTRAINT ledger_lot_terms_check ON ledger IS 'Only a credit carries lot terms: a category paid or promotional, a priority from 0 to 100.';

COMMENT ON CONSTRAINT ledger_reverses_check ON ledger IS 'Only a restore names the reversal it undoes.';

ALTER TABLE ledger ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME ledger_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY ledger
    ADD CONSTRAINT ledger_account_seq_key UNIQUE (account_id, seq);

COMMENT ON CONSTRAINT ledger_account_seq_key ON ledger IS 'One entry per position of an account: two postings that read the same last_seq cannot both insert. Also serves statements and balance lookups by (account_id, seq).';

ALTER TABLE ledger
    ADD CONSTRAINT ledger_feature_format_check CHECK ((feature ~ '^[A-Za-z0-9_.:-]{1,64}$'::text)) NOT VALID;

COMMENT ON CONSTRAINT ledger_feature_format_check ON ledger IS 'A feature as holds_feature_format_check accepts it: 1-64 characters of [A-Za-z0-9_.:-].';

ALTER TABLE ledger
    ADD CONSTRAINT ledger_kind_sign_check CHECK (
CASE kind
    WHEN 'topup'::text THEN (amount > 0)
    WHEN 'grant'::text THEN (amount > 0)
    WHEN 'refund_restore'::text THEN (amount > 0)
    WHEN 'dispute_won'::text THEN (amount > 0)
    WHEN 'usage'::text THEN (amount <= 0)
    WHEN 'refund'::text THEN (amount < 0)
    WHEN 'dispute'::text THEN (amount < 0)
    WHEN 'expiry'::text THEN (amount < 0)
    WHEN 'void'::text THEN (amount < 0)
    WHEN 'adjustment'::text THEN (amount <> 0)
    ELSE false
END) NOT VALID;

COMMENT ON CONSTRAINT ledger_kind_sign_check ON ledger IS 'Credits are positive and debits negative, per kind: topup, grant, refund_restore, dispute_won > 0; refund, dispute, expiry, void < 0; usage <= 0 (0: a member''s part of a debit its pools paid in full, SPEC §18); adjustment non-zero. Any other kind is refused.';

ALTER TABLE ledger
    ADD CONSTRAINT ledger_lot_cost_check CHECK ((((lot_cost_amount IS NULL) AND (lot_cost_currency IS NULL)) OR ((amount > 0) AND (lot_cost_amount >= 0) AND (lot_cost_currency ~ '^[a-z]{3}$'::text)))) NOT VALID;

COMMENT ON CONSTRAINT ledger_lot_cost_check ON ledger IS 'A cost goes with a credit, both or neither: an amount >= 0 in a three-letter lower case currency.';

ALTER TABLE ledger
    ADD CONSTRAINT ledger_on_behalf_of_check CHECK (((on_behalf_of IS NULL) OR ((on_behalf_of <> account_id) AND (kind = 'usage'::text)))) NOT VALID;

COMMENT ON CONSTRAINT ledger_on_behalf_of_check ON ledger IS 'Only a debit (usage) is paid on behalf of a member, and never on an account''s own behalf.';

ALTER TABLE ONLY ledger
    ADD CONSTRAINT ledger_pkey PRIMARY KEY (id);

COMMENT ON CONSTRAINT ledger_pkey ON ledger IS 'One entry per id. Ids come from an identity and only grow, which the keyset pagination of an account''s entries relies on.';

ALTER TABLE ledger
    ADD CONSTRAINT ledger_subject_format_check CHECK ((subject ~ '^[A-Za-z0-9_.:@-]{1,128}$'::text)) NOT VALID;

COMMENT ON CONSTRAINT ledger_subject_format_check ON ledger IS 'A subject as holds_subject_format_check accepts it: 1-128 characters of [A-Za-z0-9_.:@-].';

CREATE INDEX ledger_account_created_idx ON ledger USING btree (account_id, created_at, seq);

COMMENT ON INDEX ledger_account_created_idx IS 'Finds the last entry of an account at or before a time (balance at, statement bounds); created_at grows with seq within an account, as both are taken under the account''s row lock.';

CREATE INDEX ledger_account_id_idx ON ledger USING btree (account_id, id);

COMMENT ON INDEX ledger_account_id_idx IS 'Serves an account''s entries newest first with keyset pagination on id, and the balance check in verify.';

-- The Stripe drift pass (SPEC §20, sql/queries/stripe_drift.sql) reads every money-backed credit the ledger
-- posted in a window (a day): without this index that is a scan of the whole ledger per window, with it a
-- range of the few credit rows. Partial, so that usage, reversals and the rest (most of the ledger) add
-- nothing to it.
CREATE INDEX ledger_credits_created_idx ON ledger USING btree (created_at) WHERE (kind = ANY (ARRAY['topup'::text, 'refund_restore'::text, 'dispute_won'::text]));

COMMENT ON INDEX ledger_credits_created_idx IS 'The money-backed credits (topup, refund_restore, dispute_won) by posting time: the drift pass reads a window''s through it (StripeDriftCreditsBetween) instead of scanning the ledger.';

CREATE UNIQUE INDEX ledger_dedupe_idx ON ledger USING btree (dedupe_key) WHERE (dedupe_key IS NOT NULL);

COMMENT ON INDEX ledger_dedupe_idx IS 'An effect with a dedupe key is posted at most once. Posting uses INSERT ... ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING, so a replay inserts nothing.';

CREATE INDEX ledger_payment_intent_idx ON ledger USING btree (payment_intent) WHERE (payment_intent IS NOT NULL);

COMMENT ON INDEX ledger_payment_intent_idx IS 'Finds the credit and reversals of one Stripe payment.';

-- ==== accounts ============================================================================================
-- Shared balances (SPEC §18): an account may have a parent, its pool. An account with a parent is a member;
-- its ancestors are its pools (an organisation, a team). The tree is held by the database:
-- accounts_parent_not_self_check, accounts_depth_check (at most three levels; depth = number of ancestors)
-- and the trigger accounts_parent_tree. The parent is set when the account is created and never changes, so
-- the depth, derived from the parent's when the row is written, stays true, and an account is deeper than
-- every one of its ancestors.
--
-- On Citus accounts are distributed by id, a tree's accounts on whatever shards their ids hash to, and a
-- cascade that draws on a pool on another node commits with two-phase commit. The other way, distributing
-- every account table by the tree's root, would change the distribution column of every account table (and
-- of the keys that include it) for the few accounts that belong to trees. Measured on the local cluster (two
-- workers, pgbench, a transaction locking and updating two accounts as a cascade does): 157 tps with both on
-- one shard, 83 tps across nodes. Billing cascades a whole chunk of decisions in one transaction, so the
-- two-phase commit is paid per chunk, not per decision (docs/scaling.md).
--
-- Auto-recharge and low-balance alerts (SPEC §13, §17) both watch available = balance - held; the deferred
-- trigger accounts_available_watch decides when. The recharge status is stored (recharge_status) so that
-- each of its changes is told once.

CREATE TABLE accounts (
    id text NOT NULL,
    currency text NOT NULL,
    balance bigint DEFAULT 0 NOT NULL,
    created_at timestamptz DEFAULT now() NOT NULL,
    last_seq bigint DEFAULT 0 NOT NULL,
    held bigint DEFAULT 0 NOT NULL,
    stripe_customer text,
    payment_method text,
    recharge_enabled boolean DEFAULT false NOT NULL,
    recharge_threshold bigint,
    recharge_amount bigint,
    recharge_episode bigint DEFAULT 1 NOT NULL,
    recharge_failures integer DEFAULT 0 NOT NULL,
    low_balance_alert bigint,
    alert_episode bigint DEFAULT 1 NOT NULL,
    recharge_budget_amount bigint,
    recharge_budget_count integer,
    recharge_budget_period text,
    recharge_cooldown interval DEFAULT '00:00:00'::interval NOT NULL,
    recharge_mode text DEFAULT 'fixed'::text NOT NULL,
    recharge_target bigint,
    recharge_next_eligible_at timestamptz,
    recharge_retry integer DEFAULT 0 NOT NULL,
    recharge_stopped text,
    recharge_status text DEFAULT 'off'::text NOT NULL,
    recharge_status_next_eligible_at timestamptz,
    recharge_status_seq bigint DEFAULT 0 NOT NULL,
    unit text DEFAULT 'currency'::text NOT NULL,
    parent_id text,
    depth smallint DEFAULT 0 NOT NULL,
    CONSTRAINT accounts_currency_format_check CHECK ((currency ~ '^[a-z]{3}$'::text)),
    CONSTRAINT accounts_depth_check CHECK (depth BETWEEN 0 AND 2 AND (depth = 0) = (parent_id IS NULL)),
    CONSTRAINT accounts_held_nonnegative_check CHECK ((held >= 0)),
    CONSTRAINT accounts_id_format_check CHECK ((id ~ '^[A-Za-z0-9_.:-]{1,64}$'::text)),
    CONSTRAINT accounts_low_balance_alert_check CHECK (((low_balance_alert >= '-1000000000000000'::bigint) AND (low_balance_alert <= '1000000000000000'::bigint))),
    CONSTRAINT accounts_parent_not_self_check CHECK ((parent_id <> id)),
    CONSTRAINT accounts_recharge_budget_check CHECK ((((recharge_budget_period IS NULL) = ((recharge_budget_amount IS NULL) AND (recharge_budget_count IS NULL))) AND (recharge_budget_period = ANY (ARRAY['day'::text, 'week'::text, 'month'::text])) AND ((recharge_budget_amount >= 1) AND (recharge_budget_amount <= '1000000000000000'::bigint)) AND ((recharge_budget_count >= 1) AND (recharge_budget_count <= 1000000)) AND ((recharge_mode <> 'fixed'::text) OR (recharge_budget_amount >= recharge_amount)))),
    CONSTRAINT accounts_recharge_cooldown_check CHECK (((recharge_cooldown >= '00:00:00'::interval) AND (recharge_cooldown <= '30 days'::interval))),
    CONSTRAINT accounts_recharge_enabled_check CHECK (((NOT recharge_enabled) OR ((recharge_threshold IS NOT NULL) AND (stripe_customer IS NOT NULL) AND (payment_method IS NOT NULL)))),
    CONSTRAINT accounts_recharge_failures_check CHECK (((recharge_failures >= 0) AND (recharge_failures <= 3))),
    CONSTRAINT accounts_recharge_mode_check CHECK (((recharge_mode = ANY (ARRAY['fixed'::text, 'target'::text])) AND ((recharge_mode = 'fixed'::text) OR ((recharge_target IS NOT NULL) AND (recharge_target > recharge_threshold) AND (recharge_target <= '1000000000000000'::bigint))))),
    CONSTRAINT accounts_recharge_retry_check CHECK (((recharge_retry >= 0) AND (recharge_retry <= 3))),
    CONSTRAINT accounts_recharge_settings_check CHECK ((((recharge_threshold IS NULL) = (recharge_amount IS NULL)) AND ((recharge_threshold >= 0) AND (recharge_threshold <= '1000000000000000'::bigint)) AND ((recharge_amount >= 1) AND (recharge_amount <= '1000000000000000'::bigint)))),
    CONSTRAINT accounts_recharge_status_check CHECK (((recharge_status = ANY (ARRAY['ready'::text, 'pending_attempt'::text, 'cooling_down'::text, 'budget_exhausted'::text, 'requires_action'::text, 'disabled_after_failures'::text, 'payment_method_required'::text, 'off'::text])) AND ((recharge_status_next_eligible_at IS NULL) OR (recharge_status = ANY (ARRAY['cooling_down'::text, 'budget_exhausted'::text]))) AND (recharge_status_seq >= 0))),
    CONSTRAINT accounts_recharge_stopped_check CHECK (((recharge_stopped IS NULL) OR ((recharge_stopped = ANY (ARRAY['disabled_after_failures'::text, 'payment_method_required'::text])) AND (NOT recharge_enabled)))),
    CONSTRAINT accounts_recharge_unit_check CHECK (((unit = 'currency'::text) OR (recharge_threshold IS NULL))),
    CONSTRAINT accounts_unit_check CHECK ((unit = ANY (ARRAY['currency'::text, 'credits'::text])))
);

COMMENT ON TABLE accounts IS 'A prepaid-credits account. One currency, fixed at creation; amounts are bigint minor units of it.';

COMMENT ON COLUMN accounts.balance IS 'Cached sum of this account''s ledger entries, equal to the balance_after of its last entry; moved only by the trigger ledger_chain_advance, in the statement that inserts the entries. `onceledger verify` checks it.';

COMMENT ON COLUMN accounts.last_seq IS 'The seq of this account''s last entry (0: none). A posting locks the account row and numbers its entries last_seq + 1, + 2, ...; ledger_chain_advance moves it.';

COMMENT ON COLUMN accounts.held IS 'Sum of the amounts of this account''s holds in status held, moved in the transaction that reserves or resolves each hold; `onceledger verify` checks it against holds. Available = balance - held.';

COMMENT ON COLUMN accounts.stripe_customer IS 'The Stripe customer a saved card belongs to: created for a top-up asking save_payment_method, recorded from its completed Checkout Session.';

COMMENT ON COLUMN accounts.payment_method IS 'The card saved for off-session use (setup_future_usage=off_session), recorded from the payment''s payment_intent.succeeded. Auto-recharge charges it.';

COMMENT ON COLUMN accounts.recharge_enabled IS 'Auto-recharge is on (opt-in, PUT /v1/accounts/{id}/recharge); turned off by three failed attempts in a row.';

COMMENT ON COLUMN accounts.recharge_threshold IS 'A debit leaving available (balance - held) below this starts an attempt, once per episode.';

COMMENT ON COLUMN accounts.recharge_amount IS 'What one recharge attempt buys, in minor units of the account''s currency.';

COMMENT ON COLUMN accounts.recharge_episode IS 'The current low-balance episode: recharge_attempts holds at most one attempt per episode. Advanced by accounts_available_watch when available rises to the threshold or above after an attempt.';

COMMENT ON COLUMN accounts.recharge_failures IS 'Recharge attempts failed in a row; reset by a success or by enabling again. The third disables recharge.';

COMMENT ON COLUMN accounts.low_balance_alert IS 'Alert threshold (PUT /v1/accounts/{id}/alerts): balance.low when available falls below it, balance.recovered when it rises back. NULL: no alerts.';

COMMENT ON COLUMN accounts.alert_episode IS 'The current alert episode for low_balance_alert: advanced by each recovery, so balance_alerts holds one low and one recovery per crossing.';

COMMENT ON COLUMN accounts.recharge_budget_amount IS 'At most this much asked of the card per budget window (NULL: no amount budget).';

COMMENT ON COLUMN accounts.recharge_budget_count IS 'At most this many attempts per budget window (NULL: no count budget).';

COMMENT ON COLUMN accounts.recharge_budget_period IS 'The budget''s calendar window, in UTC on the database clock: day, week (from Monday) or month. NULL: no budget.';

COMMENT ON COLUMN accounts.recharge_cooldown IS 'The least time between the creation of two attempts (0 to 30 days).';

COMMENT ON COLUMN accounts.recharge_mode IS 'fixed: an attempt buys recharge_amount; target: it buys what brings available back to recharge_target (open holds and debt included), never less than Stripe''s minimum charge for the currency.';

COMMENT ON COLUMN accounts.recharge_target IS 'The available balance a target-mode attempt restores.';

COMMENT ON COLUMN accounts.recharge_next_eligible_at IS 'No attempt is created before this time: the last attempt''s creation plus the cooldown. Claimed by the conditional UPDATE of accounts_available_watch that creates an attempt.';

COMMENT ON COLUMN accounts.recharge_retry IS 'The retry of the current episode that the next attempt would be (0: the first). Raised only by the failure ladder''s job; reset with each new episode.';

COMMENT ON COLUMN accounts.recharge_stopped IS 'Why recharge was turned off by its failures: disabled_after_failures (three in a row) or payment_method_required (a hard decline forgot the card). NULL when it was not; cleared by a PUT.';

COMMENT ON COLUMN accounts.recharge_status IS 'The recharge status as recharge_status_compute gives it, moved by recharge_status_sync in the transaction that changes it; a cooling_down or budget_exhausted status whose time passed is moved by the sweep.';

COMMENT ON COLUMN accounts.recharge_status_next_eligible_at IS 'When the stored cooling_down or budget_exhausted status ends (the sweep moves it then).';

COMMENT ON COLUMN accounts.recharge_status_seq IS 'How many times the status changed: the number of its last recharge_status_changes row.';

COMMENT ON COLUMN accounts.unit IS 'What the balance counts: currency (the minor unit of the account''s currency; top-ups are paid in that currency) or credits (a unit of the product''s own; top-ups may be paid in any currency, at their order''s price). Chosen when the account is created.';

COMMENT ON COLUMN accounts.parent_id IS 'The pool this account draws on when its own available runs out (SPEC §18); NULL: a root. Set at creation, never changed (trigger accounts_parent_tree).';

COMMENT ON COLUMN accounts.depth IS 'How many ancestors the account has: 0 for a root, the parent''s depth plus one otherwise (derived by trigger accounts_parent_tree). Locks are taken roots first: by depth, then id (accounts_lock).';

COMMENT ON CONSTRAINT accounts_currency_format_check ON accounts IS 'Currency is a lower-case ISO 4217 code, as Stripe writes it; it is never converted.';

COMMENT ON CONSTRAINT accounts_depth_check ON accounts IS 'A tree has at most three levels (organisation, team, member): depth 0 to 2, and 0 exactly for a root.';

COMMENT ON CONSTRAINT accounts_held_nonnegative_check ON accounts IS 'Reservations never go below zero: a hold is released at most once, by the transaction that moved it out of held.';

COMMENT ON CONSTRAINT accounts_id_format_check ON accounts IS 'Account ids are 1-64 characters of [A-Za-z0-9_.:-], so they embed safely in dedupe keys and URLs.';

COMMENT ON CONSTRAINT accounts_low_balance_alert_check ON accounts IS 'An alert threshold is within the amounts the API accepts (|N| <= 10^15).';

COMMENT ON CONSTRAINT accounts_parent_not_self_check ON accounts IS 'No account is its own parent.';

COMMENT ON CONSTRAINT accounts_recharge_budget_check ON accounts IS 'A budget names its window and at least one of amount (1..10^15) and count (1..10^6); in fixed mode it allows at least one recharge.';

COMMENT ON CONSTRAINT accounts_recharge_cooldown_check ON accounts IS 'A cooldown is between 0 and 30 days.';

COMMENT ON CONSTRAINT accounts_recharge_enabled_check ON accounts IS 'Recharge can be on only with settings and a saved card (customer and payment method): enabling without one is refused by the conditional update as payment_method_required.';

COMMENT ON CONSTRAINT accounts_recharge_failures_check ON accounts IS 'At most three failures in a row are counted: the third disables recharge.';

COMMENT ON CONSTRAINT accounts_recharge_mode_check ON accounts IS 'fixed or target; target mode restores a target above the threshold (and within 10^15).';

COMMENT ON CONSTRAINT accounts_recharge_retry_check ON accounts IS 'An episode has at most three retries (the ladder 1h, 6h, 24h).';

COMMENT ON CONSTRAINT accounts_recharge_settings_check ON accounts IS 'Recharge settings come as a pair: a threshold of 0..10^15 and an amount of 1..10^15, or neither.';

COMMENT ON CONSTRAINT accounts_recharge_status_check ON accounts IS 'A status of SPEC §17; only cooling_down and budget_exhausted end at a time.';

COMMENT ON CONSTRAINT accounts_recharge_stopped_check ON accounts IS 'A reason for stopping is one the failure ladder gives, and recharge is off while it stands.';

COMMENT ON CONSTRAINT accounts_recharge_unit_check ON accounts IS 'Auto-recharge charges its amount in the account''s currency for as many units, which is a price only when the unit is that currency: an account counted in credits has no recharge settings (the API answers 400), so that credits are never bought 1:1 by accident.';

COMMENT ON CONSTRAINT accounts_unit_check ON accounts IS 'An account counts currency (its currency''s minor unit) or credits.';

ALTER TABLE ONLY accounts
    ADD CONSTRAINT accounts_pkey PRIMARY KEY (id);

COMMENT ON CONSTRAINT accounts_pkey ON accounts IS 'One account per id: concurrent creations of the same account collapse to one (ON CONFLICT (id) DO NOTHING).';

CREATE INDEX accounts_parent_id_idx ON accounts USING btree (parent_id) WHERE (parent_id IS NOT NULL);

COMMENT ON INDEX accounts_parent_id_idx IS 'The members of a pool (GET /v1/accounts/{id}/members).';

CREATE INDEX accounts_recharge_status_due_idx ON accounts USING btree (recharge_status_next_eligible_at) WHERE (recharge_status = ANY (ARRAY['cooling_down'::text, 'budget_exhausted'::text]));

COMMENT ON INDEX accounts_recharge_status_due_idx IS 'Finds the statuses whose time has passed, for the sweep.';

-- ==== audit_log ===========================================================================================
-- The audit trail: who did what through the API and the console, and what they were refused. One row per
-- mutating request, per refused request (401, 403) and per console action, with the key's name, the route,
-- the ids it named and its outcome. Rows are never changed or deleted (audit_log_append_only), so the trail
-- cannot be rewritten by the service's own role either. account_id is '' when the request named no account
-- (a decision batch, a lot voided by its number, a console login, an event's replay): the table is an
-- account table like the others, distributed by account_id on Citus (db/citus.go), with account_id in its
-- primary key.

CREATE TABLE audit_log (
    account_id text DEFAULT ''::text NOT NULL,
    id bigint NOT NULL,
    at timestamptz DEFAULT now() NOT NULL,
    key_name text NOT NULL,
    action text NOT NULL,
    target_id text DEFAULT ''::text NOT NULL,
    status smallint NOT NULL,
    outcome text NOT NULL,
    remote_addr text DEFAULT ''::text NOT NULL,
    CONSTRAINT audit_log_action_check CHECK ((action <> ''::text)),
    CONSTRAINT audit_log_outcome_check CHECK ((outcome <> ''::text)),
    CONSTRAINT audit_log_status_check CHECK (((status >= 100) AND (status <= 599)))
);

COMMENT ON TABLE audit_log IS 'Who did what: one row per mutating request, refused request and console action; append-only.';

COMMENT ON COLUMN audit_log.account_id IS 'The account the request named, '''' when none (the distribution column on Citus).';

COMMENT ON COLUMN audit_log.key_name IS 'The name of the API key (ONCELEDGER_API_KEYS) that made the request, '''' when none was recognised.';

COMMENT ON COLUMN audit_log.action IS 'The method and route pattern (POST /v1/accounts/{id}/adjustments), or the console action.';

COMMENT ON COLUMN audit_log.target_id IS 'The id the request named besides its account (a hold, a lot, an event), '''' when none.';

COMMENT ON COLUMN audit_log.outcome IS '''ok'', or the error code the request was answered with (insufficient_scope, invalid_api_key, ...).';

COMMENT ON CONSTRAINT audit_log_action_check ON audit_log IS 'Every record says what was done.';

COMMENT ON CONSTRAINT audit_log_outcome_check ON audit_log IS 'Every record says how it ended.';

COMMENT ON CONSTRAINT audit_log_status_check ON audit_log IS 'An HTTP status.';

ALTER TABLE audit_log ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME audit_log_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY audit_log
    ADD CONSTRAINT audit_log_pkey PRIMARY KEY (account_id, id);

COMMENT ON CONSTRAINT audit_log_pkey ON audit_log IS 'One row per record; account_id first, so that on Citus the key holds the distribution column.';

CREATE INDEX audit_log_id_idx ON audit_log USING btree (id);

COMMENT ON INDEX audit_log_id_idx IS 'The newest records first, across accounts: GET /v1/audit and the console''s page.';

-- ==== balance_alerts ======================================================================================
-- The rows of balance_alerts, like those of recharge_attempts, recharge_blocks and recharge_status_changes,
-- are the outbox of their side effects: a row whose *_enqueued_at is NULL still needs its River job (a
-- notification; for an attempt, also the job that creates the PaymentIntent with Idempotency-Key
-- recharge:{id}). They commit with the change that caused them, and serve's sweeper turns them into River
-- jobs (unique per attempt / notification id) in the transaction that marks them enqueued, so a crash after
-- that commit loses nothing.

CREATE TABLE balance_alerts (
    account_id text NOT NULL,
    threshold bigint NOT NULL,
    episode bigint NOT NULL,
    low_available bigint NOT NULL,
    low_at timestamptz DEFAULT now() NOT NULL,
    recovered_available bigint,
    recovered_at timestamptz,
    low_enqueued_at timestamptz,
    recovered_enqueued_at timestamptz,
    CONSTRAINT balance_alerts_recovered_check CHECK ((((recovered_at IS NULL) = (recovered_available IS NULL)) AND ((recovered_enqueued_at IS NULL) OR (recovered_at IS NOT NULL))))
);

COMMENT ON TABLE balance_alerts IS 'One low-balance episode of an account against one alert threshold: created by the debit that took available below it (balance.low), completed by the credit or release that brought it back (balance.recovered). The key makes a flapping balance send one alert per crossing, never more. Also the outbox of both notifications.';

COMMENT ON COLUMN balance_alerts.low_available IS 'Available right after the debit that crossed below.';

COMMENT ON COLUMN balance_alerts.recovered_available IS 'Available right after the change that crossed back; NULL: still low.';

COMMENT ON COLUMN balance_alerts.low_enqueued_at IS 'When balance.low was enqueued; NULL: still to enqueue (outbox).';

COMMENT ON COLUMN balance_alerts.recovered_enqueued_at IS 'When balance.recovered was enqueued; NULL after a recovery: still to enqueue.';

COMMENT ON CONSTRAINT balance_alerts_recovered_check ON balance_alerts IS 'A recovery records its time and available together, and is enqueued only once it happened.';

ALTER TABLE ONLY balance_alerts
    ADD CONSTRAINT balance_alerts_pkey PRIMARY KEY (account_id, threshold, episode);

COMMENT ON CONSTRAINT balance_alerts_pkey ON balance_alerts IS 'One low alert and one recovery per (account, threshold, episode): the episode advances only on recovery.';

CREATE INDEX balance_alerts_outbox_idx ON balance_alerts USING btree (account_id) WHERE ((low_enqueued_at IS NULL) OR ((recovered_at IS NOT NULL) AND (recovered_enqueued_at IS NULL)));

COMMENT ON INDEX balance_alerts_outbox_idx IS 'Finds the alerts whose notification is still to enqueue.';

-- ==== console_sessions ====================================================================================
-- The console's sessions are kept server-side so that every replica sharing the database knows them, a
-- logout revokes a copied cookie too, and a session ends after an idle while as well as at its absolute
-- expiry. The cookie holds a random token; the table holds only its SHA-256 (id), so a read of the table
-- yields no cookie. ConsoleSessionsTouch checks revoked_at, expires_at and last_seen_at and moves
-- last_seen_at in one statement. Sessions belong to no account: on Citus the table is distributed by its own
-- id (db/citus.go), like stripe_events by event_id, and every statement names one id.

CREATE TABLE console_sessions (
    id bytea NOT NULL,
    key_name text NOT NULL,
    created_at timestamptz DEFAULT now() NOT NULL,
    last_seen_at timestamptz DEFAULT now() NOT NULL,
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz,
    CONSTRAINT console_sessions_expiry_check CHECK ((expires_at > created_at)),
    CONSTRAINT console_sessions_id_check CHECK ((octet_length(id) = 32)),
    CONSTRAINT console_sessions_key_name_check CHECK ((key_name <> ''::text))
);

COMMENT ON TABLE console_sessions IS 'Logged-in console sessions: alive while not revoked, not expired and not idle too long.';

COMMENT ON COLUMN console_sessions.id IS 'SHA-256 of the token the session cookie holds.';

COMMENT ON COLUMN console_sessions.key_name IS 'The name of the API key that logged in: the audit trail''s who.';

COMMENT ON COLUMN console_sessions.revoked_at IS 'When a logout ended the session; a copied cookie is refused from then on.';

COMMENT ON CONSTRAINT console_sessions_expiry_check ON console_sessions IS 'A session expires after it starts.';

COMMENT ON CONSTRAINT console_sessions_id_check ON console_sessions IS 'The id is a SHA-256: the table holds no token.';

COMMENT ON CONSTRAINT console_sessions_key_name_check ON console_sessions IS 'Every session names the key that logged in.';

ALTER TABLE ONLY console_sessions
    ADD CONSTRAINT console_sessions_pkey PRIMARY KEY (id);

COMMENT ON CONSTRAINT console_sessions_pkey ON console_sessions IS 'One row per session, found by its token''s hash.';

-- ==== credit_lots =========================================================================================
-- Credit lots (SPEC §12): every credit lands in a lot, every debit draws lots down in one fixed order, and
-- expiry is a ledger entry. Draw order, for every debit: priority, then expires_at (nulls last), then
-- promotional before paid, then lot id. A refund or dispute draws first from the lot of its own payment (the
-- lot made by the topup entry with the same payment_intent). A debit beyond every open lot still posts in
-- full: the uncovered part is the account's debt (lot_debts), which the next credit's lot draws first,
-- oldest debit first, so that every debit ends fully drawn (lot_draws). Restores (refund_restore,
-- dispute_won) refill the lots their reversal drew, amount for amount (lot_refills); a refilled lot that is
-- closed or past its expiry has the credit expire at once, by an expiry or void entry that ledger_append
-- posts. A priced lot records what its credit cost, and each of its movements recognises part of that cost
-- (revenue_recognitions).

CREATE TABLE credit_lots (
    account_id text NOT NULL,
    id bigint NOT NULL,
    entry_id bigint NOT NULL,
    category text NOT NULL,
    priority smallint DEFAULT 50 NOT NULL,
    amount bigint NOT NULL,
    remaining bigint NOT NULL,
    expires_at timestamptz,
    created_at timestamptz DEFAULT clock_timestamp() NOT NULL,
    closed_at timestamptz,
    cost_amount bigint DEFAULT 0 NOT NULL,
    cost_currency text,
    CONSTRAINT credit_lots_amount_positive_check CHECK ((amount > 0)),
    CONSTRAINT credit_lots_category_check CHECK ((category = ANY (ARRAY['paid'::text, 'promotional'::text]))),
    CONSTRAINT credit_lots_cost_check CHECK ((cost_amount >= 0)),
    CONSTRAINT credit_lots_cost_currency_check CHECK ((cost_currency ~ '^[a-z]{3}$'::text)),
    CONSTRAINT credit_lots_cost_currency_present_check CHECK (((cost_amount = 0) OR (cost_currency IS NOT NULL))),
    CONSTRAINT credit_lots_priority_check CHECK (((priority >= 0) AND (priority <= 100))),
    CONSTRAINT credit_lots_remaining_check CHECK (((0 <= remaining) AND (remaining <= amount)))
);

COMMENT ON TABLE credit_lots IS 'One lot per credit entry: the credit, what is left of it, and where it stands in the draw order. Made and drawn only by the trigger ledger_lots; closed by expiry and void entries.';

COMMENT ON COLUMN credit_lots.entry_id IS 'The ledger entry (a credit) that made the lot.';

COMMENT ON COLUMN credit_lots.category IS 'paid (top-ups, restores beyond their reversal) or promotional (the signup grant, positive adjustments unless they say otherwise); promotional lots are drawn before paid ones of the same priority and expiry.';

COMMENT ON COLUMN credit_lots.priority IS 'Drawn lowest first (0-100, default 50); the first key of the draw order.';

COMMENT ON COLUMN credit_lots.amount IS 'The credit the lot holds: its entry''s amount (for a restore, the part no reversal draw took it back to); for a lot made by migration 000009, the part of its credit still unspent then. Debt it repaid is among its lot_draws.';

COMMENT ON COLUMN credit_lots.remaining IS 'What is left: amount - its lot_draws + its lot_refills (verify checks it). Open lots'' remaining less lot_debts is the account''s balance.';

COMMENT ON COLUMN credit_lots.expires_at IS 'When the remaining expires (null: never); the reconciler pass posts the expiry entry. Second key of the draw order, nulls last.';

COMMENT ON COLUMN credit_lots.closed_at IS 'Set when an expiry or void entry took the remaining; a closed lot is never drawn again (a refill of a closed lot expires at once).';

COMMENT ON COLUMN credit_lots.cost_amount IS 'What was paid for the lot''s credit, in cost_currency''s minor units: a paid top-up''s price, an adjustment''s named cost; 0 for grants, promotional adjustments, restores beyond their reversal, and every lot made before migration 000024 (their price was never recorded with them). Recognised as the lot is drawn (revenue_recognitions).';

COMMENT ON COLUMN credit_lots.cost_currency IS 'The currency of cost_amount (lower case ISO 4217); NULL only when nothing was paid.';

COMMENT ON CONSTRAINT credit_lots_amount_positive_check ON credit_lots IS 'A lot holds a positive credit.';

COMMENT ON CONSTRAINT credit_lots_category_check ON credit_lots IS 'A lot is paid or promotional.';

COMMENT ON CONSTRAINT credit_lots_cost_check ON credit_lots IS 'A lot costs 0 or more.';

COMMENT ON CONSTRAINT credit_lots_cost_currency_check ON credit_lots IS 'A cost currency is three lower case letters.';

COMMENT ON CONSTRAINT credit_lots_cost_currency_present_check ON credit_lots IS 'A lot that cost something says in which currency.';

COMMENT ON CONSTRAINT credit_lots_priority_check ON credit_lots IS 'Priorities run from 0 (drawn first) to 100.';

COMMENT ON CONSTRAINT credit_lots_remaining_check ON credit_lots IS 'A lot is never overdrawn nor refilled beyond its amount: 0 <= remaining <= amount.';

ALTER TABLE credit_lots ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME credit_lots_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY credit_lots
    ADD CONSTRAINT credit_lots_entry_key UNIQUE (account_id, entry_id);

COMMENT ON CONSTRAINT credit_lots_entry_key ON credit_lots IS 'A credit makes at most one lot.';

ALTER TABLE ONLY credit_lots
    ADD CONSTRAINT credit_lots_pkey PRIMARY KEY (account_id, id);

COMMENT ON CONSTRAINT credit_lots_pkey ON credit_lots IS 'A lot lives under its account, so that lots shard with it (SPEC §15).';

CREATE INDEX credit_lots_expires_idx ON credit_lots USING btree (expires_at) WHERE ((closed_at IS NULL) AND (expires_at IS NOT NULL));

COMMENT ON INDEX credit_lots_expires_idx IS 'The open lots whose time is up, for the expiry pass and verify.';

CREATE INDEX credit_lots_id_idx ON credit_lots USING btree (id);

COMMENT ON INDEX credit_lots_id_idx IS 'Finds a lot by its id alone (POST /v1/lots/{id}/void).';

CREATE INDEX credit_lots_open_idx ON credit_lots USING btree (account_id) WHERE (closed_at IS NULL);

COMMENT ON INDEX credit_lots_open_idx IS 'An account''s open lots, which every debit reads in draw order; remaining is not indexed, so drawing a lot is a HOT update.';

-- ==== decisions ===========================================================================================

CREATE TABLE decisions (
    id text NOT NULL,
    seq bigint NOT NULL,
    account_id text NOT NULL,
    cost bigint NOT NULL,
    occurred_at timestamptz DEFAULT now() NOT NULL,
    received_at timestamptz DEFAULT now() NOT NULL,
    hold_id text,
    subject text,
    feature text,
    CONSTRAINT decisions_cost_positive_check CHECK ((cost > 0)),
    CONSTRAINT decisions_id_format_check CHECK ((id ~ '^[A-Za-z0-9_.:-]{1,128}$'::text))
);

COMMENT ON TABLE decisions IS 'Billable decisions as the product reported them. Billing posts one usage entry keyed decision:{id}; ledger_dedupe_idx, not a flag here, makes re-reading a decision harmless. No foreign key to accounts: a decision may arrive before its account and is billed once the account exists.';

COMMENT ON COLUMN decisions.seq IS 'Arrival order: the reconciler reads in chunks by seq. Any cursor over it is an optimisation only.';

COMMENT ON COLUMN decisions.hold_id IS 'The hold (of the same account) this decision spends, if any: billing the decision captures it in the same transaction, when it is still held and the decision was received while it was live.';

COMMENT ON COLUMN decisions.subject IS 'Who the decision spent for; NULL: nobody named.';

COMMENT ON COLUMN decisions.feature IS 'What the decision spent on; NULL: nothing named.';

COMMENT ON CONSTRAINT decisions_cost_positive_check ON decisions IS 'A decision costs a positive number of minor units (it is posted negated, as usage).';

COMMENT ON CONSTRAINT decisions_id_format_check ON decisions IS 'Decision ids are 1-128 characters of [A-Za-z0-9_.:-], so they embed safely in dedupe keys (decision:{id}).';

ALTER TABLE decisions ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME decisions_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE decisions
    ADD CONSTRAINT decisions_feature_format_check CHECK ((feature ~ '^[A-Za-z0-9_.:-]{1,64}$'::text)) NOT VALID;

COMMENT ON CONSTRAINT decisions_feature_format_check ON decisions IS 'A feature as holds_feature_format_check accepts it.';

ALTER TABLE decisions
    ADD CONSTRAINT decisions_hold_id_format_check CHECK ((hold_id ~ '^[A-Za-z0-9_.:-]{1,128}$'::text)) NOT VALID;

COMMENT ON CONSTRAINT decisions_hold_id_format_check ON decisions IS 'A hold id as holds_id_format_check accepts it.';

ALTER TABLE ONLY decisions
    ADD CONSTRAINT decisions_pkey PRIMARY KEY (id);

COMMENT ON CONSTRAINT decisions_pkey ON decisions IS 'A decision id is stored once; intake reports the same id with another account or cost as a conflict.';

ALTER TABLE ONLY decisions
    ADD CONSTRAINT decisions_seq_key UNIQUE (seq);

COMMENT ON CONSTRAINT decisions_seq_key ON decisions IS 'One arrival position per decision, so that billing reads every decision exactly once in seq order.';

ALTER TABLE decisions
    ADD CONSTRAINT decisions_subject_format_check CHECK ((subject ~ '^[A-Za-z0-9_.:@-]{1,128}$'::text)) NOT VALID;

COMMENT ON CONSTRAINT decisions_subject_format_check ON decisions IS 'A subject as holds_subject_format_check accepts it.';

-- ==== hold_reservations ===================================================================================
-- Holds on members reserve on their pools (SPEC §18). A hold on a member reserves what the member's own
-- available covers on the member, and the rest on its parent, then on its grandparent, in the authorisation's
-- transaction, with the tree locked roots first (accounts_lock). A hold on a root, or on a member whose own
-- available covers it, writes no row here. Capture, void and expiry release exactly what was reserved, on
-- every level, in the transaction that moves the hold out of held; a capture posts the member's part (what
-- the member reserved) and each pool's part (what that pool reserved), in that order, each under its own
-- key. So, for every account, held = the sum of (amount - pooled) of its own holds still held plus the
-- reservations of its members' holds still held (`onceledger verify`, "held"). On Citus the table is
-- distributed by account_id (the hold's account), colocated with holds, so that a hold and its reservations
-- are on one shard; each pool's row in accounts is updated where it is.

CREATE TABLE hold_reservations (
    account_id text NOT NULL,
    hold_id text NOT NULL,
    pool_id text NOT NULL,
    amount bigint NOT NULL,
    CONSTRAINT hold_reservations_amount_check CHECK ((amount > 0)),
    CONSTRAINT hold_reservations_pool_check CHECK ((pool_id <> account_id))
);

COMMENT ON TABLE hold_reservations IS 'What a pool reserved for a hold on one of its members (SPEC §18), written with the hold by HoldsReservePools and never changed or deleted (hold_reservations_append_only): whether it still counts in the pool''s held is the hold''s status. Keyed by the hold''s account, as holds are.';

COMMENT ON COLUMN hold_reservations.account_id IS 'The hold''s account: the member.';

COMMENT ON COLUMN hold_reservations.hold_id IS 'The hold, of account_id, that the pool reserved for.';

COMMENT ON COLUMN hold_reservations.pool_id IS 'The pool that reserved: the member''s parent or grandparent (checked by HoldsReservePools under the tree''s locks, and by `onceledger verify`).';

COMMENT ON COLUMN hold_reservations.amount IS 'What the pool reserved, counted in its accounts.held while the hold is held.';

COMMENT ON CONSTRAINT hold_reservations_amount_check ON hold_reservations IS 'A pool that reserves nothing for a hold has no row.';

COMMENT ON CONSTRAINT hold_reservations_pool_check ON hold_reservations IS 'The hold''s own account is no pool of it: what it reserved itself is the hold''s amount - pooled.';

ALTER TABLE ONLY hold_reservations
    ADD CONSTRAINT hold_reservations_pkey PRIMARY KEY (account_id, hold_id, pool_id);

COMMENT ON CONSTRAINT hold_reservations_pkey ON hold_reservations IS 'One reservation per hold and pool; the account first, so that the key holds on one shard on Citus (SPEC §15).';

-- ==== holds ===============================================================================================
-- Holds (SPEC §11): credits reserved for work about to happen, each resolved exactly once. subject and
-- feature say who spent and on what: spend limits (SPEC §16) match them against their scopes.

CREATE TABLE holds (
    account_id text NOT NULL,
    id text NOT NULL,
    amount bigint NOT NULL,
    status text DEFAULT 'held'::text NOT NULL,
    captured_amount bigint,
    decision_id text,
    expires_at timestamptz NOT NULL,
    created_at timestamptz DEFAULT now() NOT NULL,
    resolved_at timestamptz,
    subject text,
    feature text,
    limit_ids text[] DEFAULT '{}'::text[] NOT NULL,
    window_starts timestamptz[] DEFAULT '{}'::timestamptz[] NOT NULL,
    pooled bigint DEFAULT 0 NOT NULL,
    CONSTRAINT holds_amount_positive_check CHECK ((amount > 0)),
    CONSTRAINT holds_captured_amount_check CHECK (
CASE
    WHEN (status = 'captured'::text) THEN ((captured_amount >= 1) AND (captured_amount <= amount))
    ELSE ((captured_amount IS NULL) AND (decision_id IS NULL))
END),
    CONSTRAINT holds_expires_after_created_check CHECK ((expires_at > created_at)),
    CONSTRAINT holds_id_format_check CHECK ((id ~ '^[A-Za-z0-9_.:-]{1,128}$'::text)),
    CONSTRAINT holds_pooled_check CHECK (((pooled >= 0) AND (pooled <= amount))),
    CONSTRAINT holds_resolved_at_check CHECK (((status = 'held'::text) = (resolved_at IS NULL))),
    CONSTRAINT holds_status_check CHECK ((status = ANY (ARRAY['held'::text, 'captured'::text, 'voided'::text, 'expired'::text])))
);

COMMENT ON TABLE holds IS 'A reservation of credits on one account, chosen by the caller''s id (the primary key makes authorising idempotent). It is created held and leaves held exactly once, by a conditional UPDATE ... WHERE status = ''held'' in the transaction that releases its reservation (and, for a capture, posts its usage). Holds are not ledger entries: only a capture moves the balance.';

COMMENT ON COLUMN holds.captured_amount IS 'What the capture took: the amount asked (API), or least(cost, amount) for a decision. A decision costing more than its hold is still billed in full.';

COMMENT ON COLUMN holds.decision_id IS 'The decision whose billing captured the hold; null when it was captured through the API (its usage entry is then keyed hold:{account_id}:{id}).';

COMMENT ON COLUMN holds.expires_at IS 'On the database clock. A capture needs expires_at > now(); the reconciler pass expires the rest.';

COMMENT ON COLUMN holds.subject IS 'Who the hold spends for (a user, an API client, an agent); NULL: nobody named.';

COMMENT ON COLUMN holds.feature IS 'What the hold spends on; NULL: nothing named.';

COMMENT ON COLUMN holds.limit_ids IS 'The spend limits the hold was counted against when it was authorised (those that applied then), in lockstep with window_starts: its capture, void or expiry moves exactly those windows, whatever the limits became since. A limit created after the hold (spend_limits.created_at) is never moved by it.';

COMMENT ON COLUMN holds.window_starts IS 'The start of the window of each of limit_ids the hold was counted in.';

COMMENT ON COLUMN holds.pooled IS 'Of amount, what the hold reserved on its account''s pools (the sum of its hold_reservations); the account itself reserved amount - pooled. 0 for a hold on a root, or one the member''s own available covered. Written with the hold, never changed.';

COMMENT ON CONSTRAINT holds_amount_positive_check ON holds IS 'A hold reserves a positive number of minor units.';

COMMENT ON CONSTRAINT holds_captured_amount_check ON holds IS 'Only a captured hold has a captured amount, from 1 up to the held amount (never above the hold), and only a captured hold names the decision that captured it.';

COMMENT ON CONSTRAINT holds_expires_after_created_check ON holds IS 'A hold expires after it was created (expires_in is at least one second).';

COMMENT ON CONSTRAINT holds_id_format_check ON holds IS 'Hold ids are 1-128 characters of [A-Za-z0-9_.:-], so they embed safely in the dedupe key hold:{account_id}:{id} and in URLs.';

COMMENT ON CONSTRAINT holds_pooled_check ON holds IS 'A hold''s pools reserve none of it, or part of it, or all of it: never more than its amount.';

COMMENT ON CONSTRAINT holds_resolved_at_check ON holds IS 'A hold records when it was resolved exactly when it is no longer held: a terminal hold is never held.';

COMMENT ON CONSTRAINT holds_status_check ON holds IS 'held (reserving), or one of the terminal states captured, voided, expired.';

ALTER TABLE holds
    ADD CONSTRAINT holds_feature_format_check CHECK ((feature ~ '^[A-Za-z0-9_.:-]{1,64}$'::text)) NOT VALID;

COMMENT ON CONSTRAINT holds_feature_format_check ON holds IS 'A feature is 1-64 characters of [A-Za-z0-9_.:-].';

ALTER TABLE ONLY holds
    ADD CONSTRAINT holds_pkey PRIMARY KEY (account_id, id);

COMMENT ON CONSTRAINT holds_pkey ON holds IS 'One hold per (account, id): an authorisation replayed with the same id finds the stored hold. The account leads, so the key holds on a sharded deployment.';

ALTER TABLE holds
    ADD CONSTRAINT holds_subject_format_check CHECK ((subject ~ '^[A-Za-z0-9_.:@-]{1,128}$'::text)) NOT VALID;

COMMENT ON CONSTRAINT holds_subject_format_check ON holds IS 'A subject is 1-128 characters of [A-Za-z0-9_.:@-] (an e-mail address fits).';

ALTER TABLE holds
    ADD CONSTRAINT holds_windows_check CHECK ((cardinality(limit_ids) = cardinality(window_starts))) NOT VALID;

COMMENT ON CONSTRAINT holds_windows_check ON holds IS 'One window start per limit the hold was counted against.';

-- Billing charges a decision that names a hold captured through the API only for its cost beyond the
-- captured amount (SPEC §21; LedgerAppendForDecisions in sql/queries/ledger.sql). Looking that hold up
-- through holds_pkey costs an index descent and a heap fetch for every decision that names a hold, almost
-- all of which billing captures itself: most of a chunk's time when every decision has a hold. This index
-- holds only the holds captured apart from a decision, so the lookup is a probe of a small index, or a single
-- scan of it.
CREATE INDEX holds_captured_apart_idx ON holds USING btree (account_id, id) WHERE ((status = 'captured'::text) AND (decision_id IS NULL));

COMMENT ON INDEX holds_captured_apart_idx IS 'The holds captured through the API, apart from any decision: what billing looks up to charge a decision naming one only beyond its captured amount (SPEC §21).';

CREATE INDEX holds_held_expires_at_idx ON holds USING btree (expires_at) WHERE (status = 'held'::text);

COMMENT ON INDEX holds_held_expires_at_idx IS 'Finds the holds still held whose time is up, for the expiry pass and verify; small, since it only holds unresolved holds.';

-- ==== lot_debts ===========================================================================================

CREATE TABLE lot_debts (
    account_id text NOT NULL,
    entry_id bigint NOT NULL,
    seq bigint NOT NULL,
    uncovered bigint NOT NULL,
    CONSTRAINT lot_debts_uncovered_positive_check CHECK ((uncovered > 0))
);

COMMENT ON TABLE lot_debts IS 'The debits not yet fully drawn: the account''s debt, debit by debit. The next credit''s lot draws them oldest first (by seq) and the row goes once the debit is covered.';

COMMENT ON COLUMN lot_debts.seq IS 'The debit''s seq: debts are repaid in this order.';

COMMENT ON COLUMN lot_debts.uncovered IS 'The part of the debit no lot has covered yet.';

COMMENT ON CONSTRAINT lot_debts_uncovered_positive_check ON lot_debts IS 'A covered debit has no row.';

ALTER TABLE ONLY lot_debts
    ADD CONSTRAINT lot_debts_pkey PRIMARY KEY (account_id, entry_id);

COMMENT ON CONSTRAINT lot_debts_pkey ON lot_debts IS 'One row per uncovered debit; the account leads (§15).';

-- ==== lot_draws ===========================================================================================

CREATE TABLE lot_draws (
    account_id text NOT NULL,
    entry_id bigint NOT NULL,
    lot_id bigint NOT NULL,
    amount bigint NOT NULL,
    CONSTRAINT lot_draws_amount_positive_check CHECK ((amount > 0))
);

COMMENT ON TABLE lot_draws IS 'Which debit took how much from which lot, written by the trigger ledger_lots. A debit''s draws sum to its amount once its debt is repaid; an expiry or void entry draws its own lot.';

COMMENT ON COLUMN lot_draws.entry_id IS 'The debit (ledger entry id) that drew.';

COMMENT ON CONSTRAINT lot_draws_amount_positive_check ON lot_draws IS 'A draw takes a positive amount.';

ALTER TABLE ONLY lot_draws
    ADD CONSTRAINT lot_draws_pkey PRIMARY KEY (account_id, entry_id, lot_id);

COMMENT ON CONSTRAINT lot_draws_pkey ON lot_draws IS 'One row per debit and lot (a later repayment from the same lot adds to it); the account leads (§15).';

-- ==== lot_refills =========================================================================================

CREATE TABLE lot_refills (
    account_id text NOT NULL,
    entry_id bigint NOT NULL,
    lot_id bigint NOT NULL,
    amount bigint NOT NULL,
    CONSTRAINT lot_refills_amount_positive_check CHECK ((amount > 0))
);

COMMENT ON TABLE lot_refills IS 'What a restore (refund_restore, dispute_won) gave back to each lot its reversal drew, amount for amount.';

COMMENT ON COLUMN lot_refills.entry_id IS 'The restore (ledger entry id) that refilled.';

COMMENT ON CONSTRAINT lot_refills_amount_positive_check ON lot_refills IS 'A refill gives back a positive amount.';

ALTER TABLE ONLY lot_refills
    ADD CONSTRAINT lot_refills_pkey PRIMARY KEY (account_id, entry_id, lot_id);

COMMENT ON CONSTRAINT lot_refills_pkey ON lot_refills IS 'One row per restore and lot; the account leads (§15).';

-- ==== recharge_attempts ===================================================================================
-- Recharge guardrails (SPEC §17): a budget per calendar window (recharge_windows), a cooldown, a failure
-- ladder with hard declines, a target mode, and a reason recorded for every attempt not made
-- (recharge_blocks). One attempt per (episode, retry): recharge_attempts_episode_key. A retry is made by
-- raising accounts.recharge_retry (the failure ladder's River job), which queues the same deferred trigger,
-- so a retry passes the same budget and cooldown as a first attempt. Hard declines stop at once:
-- hard_decline is computed by the schema from the decline code, and the failure's UPDATE of the account
-- forgets the card.

CREATE TABLE recharge_attempts (
    account_id text NOT NULL,
    id bigint NOT NULL,
    episode bigint NOT NULL,
    topup_id text NOT NULL,
    amount bigint NOT NULL,
    status text DEFAULT 'requested'::text NOT NULL,
    payment_intent text,
    failure_code text,
    disabled_recharge boolean DEFAULT false NOT NULL,
    created_at timestamptz DEFAULT now() NOT NULL,
    resolved_at timestamptz,
    job_enqueued_at timestamptz,
    notice_enqueued_at timestamptz,
    retry integer DEFAULT 0 NOT NULL,
    decline_code text,
    hard_decline boolean GENERATED ALWAYS AS (COALESCE((decline_code = ANY (ARRAY['lost_card'::text, 'stolen_card'::text, 'expired_card'::text, 'incorrect_number'::text, 'do_not_honor'::text, 'pickup_card'::text, 'fraudulent'::text])), false)) STORED NOT NULL,
    retry_at timestamptz,
    retry_enqueued_at timestamptz,
    CONSTRAINT recharge_attempts_amount_positive_check CHECK ((amount > 0)),
    CONSTRAINT recharge_attempts_disabled_check CHECK (((NOT disabled_recharge) OR (status = 'failed'::text))),
    CONSTRAINT recharge_attempts_resolved_check CHECK (((status = 'requested'::text) = (resolved_at IS NULL))),
    CONSTRAINT recharge_attempts_retry_at_check CHECK ((((retry_at IS NULL) OR ((status = 'failed'::text) AND (NOT disabled_recharge))) AND ((retry_enqueued_at IS NULL) OR (retry_at IS NOT NULL)))),
    CONSTRAINT recharge_attempts_retry_check CHECK (((retry >= 0) AND (retry <= 3))),
    CONSTRAINT recharge_attempts_status_check CHECK ((status = ANY (ARRAY['requested'::text, 'succeeded'::text, 'failed'::text, 'action_required'::text])))
);

COMMENT ON TABLE recharge_attempts IS 'One automatic top-up per low-balance episode of an account, inserted by accounts_available_watch in the transaction of the debit that left available below the threshold. It owns a pending top-up order (topup_id) that only payment_intent.succeeded pays. It is also the outbox of its PaymentIntent job and of its notification.';

COMMENT ON COLUMN recharge_attempts.id IS 'The attempt''s id; Stripe''s Idempotency-Key for its PaymentIntent is recharge:{id}, and its order is rch_{id}.';

COMMENT ON COLUMN recharge_attempts.episode IS 'accounts.recharge_episode when the attempt was made.';

COMMENT ON COLUMN recharge_attempts.topup_id IS 'The pending order this attempt owns (rch_{id}, no Checkout Session), inserted with it; only payment_intent.succeeded pays it, through the same pending->paid guard as Checkout orders.';

COMMENT ON COLUMN recharge_attempts.status IS 'requested until the webhook resolves it, once, by a conditional UPDATE ... WHERE status = ''requested'': succeeded (payment_intent.succeeded), failed (payment_intent.payment_failed) or action_required (the card needs the customer; never retried blindly).';

COMMENT ON COLUMN recharge_attempts.payment_intent IS 'The PaymentIntent the job created, once Stripe answered.';

COMMENT ON COLUMN recharge_attempts.failure_code IS 'Stripe''s code for a failed or paused attempt (last_payment_error.code).';

COMMENT ON COLUMN recharge_attempts.disabled_recharge IS 'This failure was the third in a row and turned recharge off.';

COMMENT ON COLUMN recharge_attempts.job_enqueued_at IS 'When the sweeper enqueued the River job creating the PaymentIntent; NULL: still to enqueue (outbox).';

COMMENT ON COLUMN recharge_attempts.notice_enqueued_at IS 'When the sweeper enqueued the notification of the resolution (recharge.failed, recharge.disabled, recharge.action_required); NULL for a resolved attempt: still to enqueue.';

COMMENT ON COLUMN recharge_attempts.retry IS 'Which try of its episode this is: 0 the first, 1..3 the failure ladder''s retries (1h, 6h, 24h).';

COMMENT ON COLUMN recharge_attempts.decline_code IS 'The card''s decline: Stripe''s decline_code, or its error code when it has none (expired_card, incorrect_number).';

COMMENT ON COLUMN recharge_attempts.hard_decline IS 'The decline says the card will never work (lost, stolen, expired, wrong number, do not honor, pick up, fraud): the failure forgets the card and stops recharge (payment_method_required), with no retry.';

COMMENT ON COLUMN recharge_attempts.retry_at IS 'A soft failure that did not stop recharge: when the ladder''s next try of the episode is due (the backoff or the cooldown''s end, whichever is later).';

COMMENT ON COLUMN recharge_attempts.retry_enqueued_at IS 'When the sweeper enqueued the River job of the retry (scheduled at retry_at); NULL: still to enqueue.';

COMMENT ON CONSTRAINT recharge_attempts_amount_positive_check ON recharge_attempts IS 'An attempt buys a positive amount.';

COMMENT ON CONSTRAINT recharge_attempts_disabled_check ON recharge_attempts IS 'Only a failure can disable recharge.';

COMMENT ON CONSTRAINT recharge_attempts_resolved_check ON recharge_attempts IS 'An attempt records when it was resolved exactly when it is no longer requested.';

COMMENT ON CONSTRAINT recharge_attempts_retry_at_check ON recharge_attempts IS 'Only a failure that left recharge on schedules a retry, and a retry is enqueued only once scheduled.';

COMMENT ON CONSTRAINT recharge_attempts_retry_check ON recharge_attempts IS 'At most three retries per episode.';

COMMENT ON CONSTRAINT recharge_attempts_status_check ON recharge_attempts IS 'requested, or one of the terminal states succeeded, failed, action_required.';

-- The attempt's order is named after the attempt (rch_{id}), so accounts_available_watch takes the id from
-- this sequence first and inserts the attempt and its order in one statement.
CREATE SEQUENCE recharge_attempts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

COMMENT ON SEQUENCE recharge_attempts_id_seq IS 'Ids of recharge attempts (and so of their orders, rch_{id}).';

ALTER SEQUENCE recharge_attempts_id_seq OWNED BY recharge_attempts.id;

ALTER TABLE ONLY recharge_attempts ALTER COLUMN id SET DEFAULT nextval('recharge_attempts_id_seq'::regclass);

ALTER TABLE ONLY recharge_attempts
    ADD CONSTRAINT recharge_attempts_episode_key UNIQUE (account_id, episode, retry);

COMMENT ON CONSTRAINT recharge_attempts_episode_key ON recharge_attempts IS 'One attempt per low-balance episode and try: debits racing below the threshold insert nothing more (ON CONFLICT DO NOTHING); only the ladder''s job opens the next try.';

ALTER TABLE ONLY recharge_attempts
    ADD CONSTRAINT recharge_attempts_pkey PRIMARY KEY (account_id, id);

COMMENT ON CONSTRAINT recharge_attempts_pkey ON recharge_attempts IS 'Attempts live under their account (distributed by account_id on Citus).';

ALTER TABLE ONLY recharge_attempts
    ADD CONSTRAINT recharge_attempts_topup_key UNIQUE (account_id, topup_id);

COMMENT ON CONSTRAINT recharge_attempts_topup_key ON recharge_attempts IS 'An order is owned by at most one attempt: the webhook finds the attempt from the order.';

CREATE INDEX recharge_attempts_job_outbox_idx ON recharge_attempts USING btree (id) WHERE (job_enqueued_at IS NULL);

COMMENT ON INDEX recharge_attempts_job_outbox_idx IS 'Finds the attempts whose PaymentIntent job is still to enqueue; small, since the sweeper empties it.';

CREATE INDEX recharge_attempts_notice_outbox_idx ON recharge_attempts USING btree (id) WHERE ((status <> 'requested'::text) AND (notice_enqueued_at IS NULL));

COMMENT ON INDEX recharge_attempts_notice_outbox_idx IS 'Finds the resolved attempts whose notification is still to enqueue.';

CREATE INDEX recharge_attempts_retry_outbox_idx ON recharge_attempts USING btree (id) WHERE ((retry_at IS NOT NULL) AND (retry_enqueued_at IS NULL));

COMMENT ON INDEX recharge_attempts_retry_outbox_idx IS 'Finds the failed attempts whose retry job is still to enqueue.';

-- ==== recharge_blocks =====================================================================================

CREATE TABLE recharge_blocks (
    account_id text NOT NULL,
    episode bigint NOT NULL,
    reason text NOT NULL,
    blocked_at timestamptz DEFAULT now() NOT NULL,
    next_eligible_at timestamptz NOT NULL,
    notice_enqueued_at timestamptz,
    CONSTRAINT recharge_blocks_reason_check CHECK ((reason = ANY (ARRAY['cooling_down'::text, 'budget_exhausted'::text])))
);

COMMENT ON TABLE recharge_blocks IS 'Why a low-balance episode got no attempt when it asked for one: inserted by accounts_available_watch instead of the attempt. The outbox of recharge.blocked.';

COMMENT ON COLUMN recharge_blocks.next_eligible_at IS 'When an attempt may be made again: the cooldown''s end, or the budget window''s.';

COMMENT ON COLUMN recharge_blocks.notice_enqueued_at IS 'When recharge.blocked was enqueued; NULL: still to enqueue.';

COMMENT ON CONSTRAINT recharge_blocks_reason_check ON recharge_blocks IS 'cooling_down or budget_exhausted.';

ALTER TABLE ONLY recharge_blocks
    ADD CONSTRAINT recharge_blocks_pkey PRIMARY KEY (account_id, episode, reason);

COMMENT ON CONSTRAINT recharge_blocks_pkey ON recharge_blocks IS 'One recharge.blocked per (account, episode, reason): 10,000 debits blocked in one episode send one.';

CREATE INDEX recharge_blocks_outbox_idx ON recharge_blocks USING btree (account_id) WHERE (notice_enqueued_at IS NULL);

COMMENT ON INDEX recharge_blocks_outbox_idx IS 'Finds the blocks whose recharge.blocked is still to enqueue.';

-- ==== recharge_status_changes =============================================================================

CREATE TABLE recharge_status_changes (
    account_id text NOT NULL,
    seq bigint NOT NULL,
    from_status text NOT NULL,
    to_status text NOT NULL,
    reason text NOT NULL,
    next_eligible_at timestamptz,
    changed_at timestamptz DEFAULT now() NOT NULL,
    notice_enqueued_at timestamptz,
    CONSTRAINT recharge_status_changes_check CHECK (((seq >= 1) AND (from_status <> to_status) AND (reason = ANY (ARRAY['settings'::text, 'attempt_requested'::text, 'attempt_succeeded'::text, 'attempt_failed'::text, 'attempt_action_required'::text, 'blocked'::text, 'episode_ended'::text, 'cooldown_ended'::text, 'window_ended'::text]))))
);

COMMENT ON TABLE recharge_status_changes IS 'Each change of accounts.recharge_status, numbered per account, inserted by recharge_status_sync with the change. The outbox of recharge.status_changed.';

COMMENT ON COLUMN recharge_status_changes.reason IS 'What changed it: settings (a PUT), attempt_<status> (an attempt made or resolved), blocked (an attempt refused by the cooldown or the budget), episode_ended (available back at the threshold), cooldown_ended or window_ended (the sweep, on the database clock).';

COMMENT ON COLUMN recharge_status_changes.next_eligible_at IS 'When the new status ends, if it is one that ends.';

COMMENT ON COLUMN recharge_status_changes.notice_enqueued_at IS 'When recharge.status_changed was enqueued; NULL: still to enqueue.';

COMMENT ON CONSTRAINT recharge_status_changes_check ON recharge_status_changes IS 'Numbered from 1, a real change, for a known reason.';

ALTER TABLE ONLY recharge_status_changes
    ADD CONSTRAINT recharge_status_changes_pkey PRIMARY KEY (account_id, seq);

COMMENT ON CONSTRAINT recharge_status_changes_pkey ON recharge_status_changes IS 'One row, so one notification, per (account, transition number): two sweeps moving the same status cannot both record it (distributed by account_id on Citus).';

CREATE INDEX recharge_status_changes_outbox_idx ON recharge_status_changes USING btree (account_id) WHERE (notice_enqueued_at IS NULL);

COMMENT ON INDEX recharge_status_changes_outbox_idx IS 'Finds the changes whose notification is still to enqueue.';

-- ==== recharge_windows ====================================================================================

CREATE TABLE recharge_windows (
    account_id text NOT NULL,
    period text NOT NULL,
    window_start timestamptz NOT NULL,
    attempts integer NOT NULL,
    recharged_amount bigint NOT NULL,
    max_attempts integer,
    max_amount bigint,
    CONSTRAINT recharge_windows_budget_check CHECK (
        attempts BETWEEN 1 AND coalesce(max_attempts, attempts)
        AND recharged_amount BETWEEN 1 AND coalesce(max_amount, recharged_amount)
    ),
    CONSTRAINT recharge_windows_period_check CHECK ((period = ANY (ARRAY['day'::text, 'week'::text, 'month'::text])))
);

COMMENT ON TABLE recharge_windows IS 'The recharge budget''s usage per calendar window: moved by accounts_available_watch, in the transaction that creates an attempt, by an upsert whose condition is the budget. An attempt beyond it is not created.';

COMMENT ON COLUMN recharge_windows.attempts IS 'Attempts created in the window (first attempts and retries alike).';

COMMENT ON COLUMN recharge_windows.recharged_amount IS 'What those attempts asked of the card, charged or declined.';

COMMENT ON COLUMN recharge_windows.max_attempts IS 'The budget count when the window last admitted an attempt.';

COMMENT ON COLUMN recharge_windows.max_amount IS 'The budget amount when the window last admitted an attempt.';

COMMENT ON CONSTRAINT recharge_windows_budget_check ON recharge_windows IS 'A window never holds more attempts, or more asked, than the budget that admitted its last attempt: the upsert that would pass it is refused by its condition, and this check fails any statement that forgets the condition.';

COMMENT ON CONSTRAINT recharge_windows_period_check ON recharge_windows IS 'day, week or month.';

ALTER TABLE ONLY recharge_windows
    ADD CONSTRAINT recharge_windows_pkey PRIMARY KEY (account_id, period, window_start);

COMMENT ON CONSTRAINT recharge_windows_pkey ON recharge_windows IS 'One row per account, period and window (distributed by account_id on Citus).';

-- ==== revenue_period_balances =============================================================================
-- The cumulative totals a month's close stores, from which the next period opens; why this table and
-- revenue_periods are reference tables on Citus: see revenue_periods.

CREATE TABLE revenue_period_balances (
    period date NOT NULL,
    currency text NOT NULL,
    measure text NOT NULL,
    amount bigint NOT NULL,
    paid_credits bigint NOT NULL,
    promotional_credits bigint NOT NULL,
    CONSTRAINT revenue_period_balances_measure_check CHECK ((measure = ANY (ARRAY['purchased'::text, 'recognised'::text, 'breakage'::text, 'refunded'::text, 'disputed'::text, 'restored'::text])))
);

COMMENT ON TABLE revenue_period_balances IS 'For each closed month, currency and measure: the total of that measure from the beginning up to the month''s end, as counted when the month closed. The next period opens from these totals. Append-only; a Citus reference table.';

COMMENT ON COLUMN revenue_period_balances.amount IS 'In the currency''s minor units.';

COMMENT ON COLUMN revenue_period_balances.paid_credits IS 'The credits of paid lots the measure counts.';

COMMENT ON COLUMN revenue_period_balances.promotional_credits IS 'The credits of promotional lots the measure counts.';

COMMENT ON CONSTRAINT revenue_period_balances_measure_check ON revenue_period_balances IS 'The measures of the liability report that move deferred revenue.';

ALTER TABLE ONLY revenue_period_balances
    ADD CONSTRAINT revenue_period_balances_pkey PRIMARY KEY (period, currency, measure);

COMMENT ON CONSTRAINT revenue_period_balances_pkey ON revenue_period_balances IS 'One total per closed month, currency and measure.';

-- ==== revenue_periods =====================================================================================
-- Period close (SPEC §19): a month's liability report, frozen. Closing a month stores the report's CSV with
-- its SHA-256 (revenue_periods) and the cumulative totals of every measure at the month's end, per currency
-- (revenue_period_balances). The stored report is what the month answers from then on; the stored totals
-- are where the next period opens, so that a correction dated in a closed month (a transaction that began
-- before the month ended and committed after its close) lands in the open period instead of changing a
-- closed one. Rows are never changed or deleted (revenue_periods_frozen).
--
-- A period belongs to the deployment, not to an account: its key is the month (and the currency), with no
-- account_id. On Citus both tables are reference tables (db/citus.go, referenceTables), not distributed
-- ones: they hold a dozen rows a month, written once a month and read by every report, so a copy on every
-- node costs nothing, lets the report join them with the account tables on any node, and keeps the foreign
-- key between them. The rule that every unique key holds the distribution column (SPEC §15) is about
-- distributed tables: a reference table has no distribution column, and its keys are checked on one copy,
-- as on plain PostgreSQL.

CREATE TABLE revenue_periods (
    period date NOT NULL,
    closed_at timestamptz DEFAULT now() NOT NULL,
    report_csv text NOT NULL,
    digest text NOT NULL,
    CONSTRAINT revenue_periods_digest_check CHECK ((digest = encode(sha256(convert_to(report_csv, 'UTF8'::name)), 'hex'::text))),
    CONSTRAINT revenue_periods_month_check CHECK ((period = (date_trunc('month'::text, (period)::timestamptz))::date))
);

COMMENT ON TABLE revenue_periods IS 'A closed month: its liability report as stored when it was closed, and the SHA-256 of that CSV. Append-only; a Citus reference table (deployment-wide, no account).';

COMMENT ON COLUMN revenue_periods.period IS 'The month''s first day (UTC): the period runs to the next month''s first day.';

COMMENT ON COLUMN revenue_periods.report_csv IS 'The liability report of the month (GET /v1/reports/liability, CSV), as the month answers it from now on.';

COMMENT ON COLUMN revenue_periods.digest IS 'SHA-256 of report_csv (lower-case hex): the Report-Digest header.';

COMMENT ON CONSTRAINT revenue_periods_digest_check ON revenue_periods IS 'The digest is the SHA-256 of the stored report, computed by the database: it cannot name another text.';

COMMENT ON CONSTRAINT revenue_periods_month_check ON revenue_periods IS 'A period is a whole calendar month.';

ALTER TABLE ONLY revenue_periods
    ADD CONSTRAINT revenue_periods_pkey PRIMARY KEY (period);

COMMENT ON CONSTRAINT revenue_periods_pkey ON revenue_periods IS 'A month is closed once; closing it again answers the stored report.';

-- ==== revenue_recognitions ================================================================================
-- Credits with a price (SPEC §19): revenue is recognised from the ledger, riding on the lot allocation.
-- lots_draw writes, in the statement of every draw of a debit (billing's chunk in one call), the recognition
-- of each draw of a priced lot; lots_apply_entry does so for the breakage of an expiry or void and for the
-- restore of a refill. The cost a lot has recognised so far is computed in numeric (no overflow), and a
-- movement's row is the difference it made, so that the rows of a lot drawn to zero sum to exactly its cost,
-- whatever the sizes and order of its draws.

CREATE TABLE revenue_recognitions (
    account_id text NOT NULL,
    lot_id bigint NOT NULL,
    entry_id bigint NOT NULL,
    posting_entry_id bigint NOT NULL,
    kind text NOT NULL,
    credits bigint NOT NULL,
    drawn_after bigint NOT NULL,
    amount bigint NOT NULL,
    currency text NOT NULL,
    created_at timestamptz NOT NULL,
    CONSTRAINT revenue_recognitions_amount_check CHECK ((amount >= 0)),
    CONSTRAINT revenue_recognitions_credits_positive_check CHECK ((credits > 0)),
    CONSTRAINT revenue_recognitions_currency_check CHECK ((currency ~ '^[a-z]{3}$'::text)),
    CONSTRAINT revenue_recognitions_drawn_after_check CHECK (((drawn_after >= 0) AND ((kind = 'restored'::text) OR (drawn_after >= credits)))),
    CONSTRAINT revenue_recognitions_kind_check CHECK ((kind = ANY (ARRAY['recognised'::text, 'breakage'::text, 'refunded'::text, 'disputed'::text, 'restored'::text])))
);

COMMENT ON TABLE revenue_recognitions IS 'What each movement of a priced lot (cost_amount > 0) recognised of its cost, written with the movement by ledger_lots (lots_draw, lots_apply_entry) in the transaction of the entry. The lot''s drawn credits (amount - remaining) after a movement decide the cost recognised so far: floor(cost_amount * drawn / amount), so a lot drawn to zero has recognised exactly its cost (largest remainder, to the minor unit), and a row''s amount is the difference it made. Append-only (revenue_recognitions_append_only).';

COMMENT ON COLUMN revenue_recognitions.entry_id IS 'The ledger entry that moved the lot: the debit that drew it (usage, capture, negative adjustment, refund, dispute, expiry, void) or the restore that refilled it.';

COMMENT ON COLUMN revenue_recognitions.posting_entry_id IS 'The ledger entry whose posting wrote the row: entry_id itself, except for a debit that was debt when posted and drew this lot later (the credit or restore that repaid it). Its created_at is the row''s.';

COMMENT ON COLUMN revenue_recognitions.kind IS 'recognised: a debit''s draw (usage, capture, negative adjustment), revenue earned; breakage: an expiry or void took the lot''s remaining, revenue of credits never used; refunded / disputed: a refund / dispute drew the lot, money given back; restored: a refund_restore or dispute_won refilled the lot, the reverse of refunded / disputed (the cost is deferred again).';

COMMENT ON COLUMN revenue_recognitions.credits IS 'The credits the movement drew from the lot (restored: gave back to it).';

COMMENT ON COLUMN revenue_recognitions.drawn_after IS 'The lot''s drawn credits (amount - remaining) right after the movement.';

COMMENT ON COLUMN revenue_recognitions.amount IS 'The cost the movement recognised (restored: deferred again), in currency''s minor units: floor(cost * drawn_after / lot amount) - floor(cost * drawn_before / lot amount), drawn_before being drawn_after -/+ credits. Never negative; the kind says the direction.';

COMMENT ON COLUMN revenue_recognitions.currency IS 'The lot''s cost_currency.';

COMMENT ON COLUMN revenue_recognitions.created_at IS 'When it was recognised: the created_at of posting_entry_id.';

COMMENT ON CONSTRAINT revenue_recognitions_amount_check ON revenue_recognitions IS 'An amount is never negative: the kind says which way the cost moved.';

COMMENT ON CONSTRAINT revenue_recognitions_credits_positive_check ON revenue_recognitions IS 'A movement moves a positive number of credits.';

COMMENT ON CONSTRAINT revenue_recognitions_currency_check ON revenue_recognitions IS 'A currency is three lower case letters, the lot''s cost_currency.';

COMMENT ON CONSTRAINT revenue_recognitions_drawn_after_check ON revenue_recognitions IS 'The lot''s drawn credits are never negative, before or after the movement.';

COMMENT ON CONSTRAINT revenue_recognitions_kind_check ON revenue_recognitions IS 'recognised, breakage, refunded, disputed or restored (see the column).';

ALTER TABLE ONLY revenue_recognitions
    ADD CONSTRAINT revenue_recognitions_pkey PRIMARY KEY (account_id, lot_id, entry_id, posting_entry_id);

COMMENT ON CONSTRAINT revenue_recognitions_pkey ON revenue_recognitions IS 'One row per lot, entry and posting (a debit repaid later may draw a lot it drew before, in another posting); the account leads (§15). A replayed entry is never posted again, so never recognised twice.';

CREATE INDEX revenue_recognitions_created_idx ON revenue_recognitions USING btree (created_at);

COMMENT ON INDEX revenue_recognitions_created_idx IS 'The recognitions of a period, across accounts (the liability report and the journal).';

-- ==== spend_limits ========================================================================================
-- Spend limits (SPEC §16): caps per calendar period that hold under any concurrency. A limit applies to the
-- whole account, one subject (who spent) or one feature; its current window counts what was held and spent
-- in it. A hard limit is an admission rule: authorising a hold moves every applicable window's held by a
-- conditional UPDATE (spent + held + amount <= cap) in the transaction that reserves the balance.
-- spend_limits, spend_windows and holds all lead with account_id, so a limit, its windows and the holds
-- counted in them live on the account's shard (SPEC §15).

CREATE TABLE spend_limits (
    account_id text NOT NULL,
    id text NOT NULL,
    scope text NOT NULL,
    scope_value text,
    period text NOT NULL,
    amount bigint NOT NULL,
    mode text NOT NULL,
    created_at timestamptz DEFAULT now() NOT NULL,
    defined_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT spend_limits_amount_positive_check CHECK ((amount > 0)),
    CONSTRAINT spend_limits_id_format_check CHECK ((id ~ '^[A-Za-z0-9_.:-]{1,64}$'::text)),
    CONSTRAINT spend_limits_mode_check CHECK ((mode = ANY (ARRAY['hard'::text, 'soft'::text]))),
    CONSTRAINT spend_limits_period_check CHECK ((period = ANY (ARRAY['day'::text, 'week'::text, 'month'::text]))),
    CONSTRAINT spend_limits_scope_check CHECK (
CASE scope
    WHEN 'account'::text THEN (scope_value IS NULL)
    WHEN 'subject'::text THEN (scope_value ~ '^[A-Za-z0-9_.:@-]{1,128}$'::text)
    WHEN 'feature'::text THEN (scope_value ~ '^[A-Za-z0-9_.:-]{1,64}$'::text)
    ELSE false
END)
);

COMMENT ON TABLE spend_limits IS 'A cap on what an account (or one subject or feature of it) spends per calendar period in UTC on the database clock. Hard: an authorisation that would take a window beyond it is refused. Soft: crossing it sends limit.reached once per window. Replacing a limit keeps what its windows counted.';

COMMENT ON COLUMN spend_limits.scope_value IS 'The subject or feature the limit applies to; NULL for an account limit.';

COMMENT ON COLUMN spend_limits.defined_at IS 'When the limit took its current definition (created or replaced): verify recounts a window''s spent from the decisions only when the definition did not change during the window.';

COMMENT ON CONSTRAINT spend_limits_amount_positive_check ON spend_limits IS 'A cap is a positive number of minor units.';

COMMENT ON CONSTRAINT spend_limits_id_format_check ON spend_limits IS 'Limit ids are 1-64 characters of [A-Za-z0-9_.:-], safe in URLs.';

COMMENT ON CONSTRAINT spend_limits_mode_check ON spend_limits IS 'hard (refuses authorisations) or soft (notifies).';

COMMENT ON CONSTRAINT spend_limits_period_check ON spend_limits IS 'Calendar windows in UTC: a day, a week starting Monday, a month.';

COMMENT ON CONSTRAINT spend_limits_scope_check ON spend_limits IS 'account (no scope_value), subject (a subject as holds accept it) or feature (a feature as holds accept it).';

ALTER TABLE ONLY spend_limits
    ADD CONSTRAINT spend_limits_pkey PRIMARY KEY (account_id, id);

COMMENT ON CONSTRAINT spend_limits_pkey ON spend_limits IS 'One limit per (account, id), the caller''s id: PUT replaces it. The account leads, for sharding.';

-- ==== spend_windows =======================================================================================

CREATE TABLE spend_windows (
    account_id text NOT NULL,
    limit_id text NOT NULL,
    window_start timestamptz NOT NULL,
    spent bigint DEFAULT 0 NOT NULL,
    held bigint DEFAULT 0 NOT NULL,
    over bigint DEFAULT 0 NOT NULL,
    reached_at timestamptz,
    reached_enqueued_at timestamptz,
    CONSTRAINT spend_windows_counts_check CHECK (((spent >= 0) AND (held >= 0) AND (over >= 0))),
    CONSTRAINT spend_windows_reached_check CHECK (((reached_enqueued_at IS NULL) OR (reached_at IS NOT NULL)))
);

COMMENT ON TABLE spend_windows IS 'What one limit counted in one calendar window: held (holds in held authorised in it), spent (captures and billed decisions), over (what decisions billed beyond a hard cap). Created by the first statement that counts in it (INSERT ... ON CONFLICT DO NOTHING under the account''s lock), moved only under it.';

COMMENT ON COLUMN spend_windows.spent IS 'Captured amounts of the holds counted here, plus what billed decisions spent beyond their hold.';

COMMENT ON COLUMN spend_windows.held IS 'The amounts of the holds in held counted here (holds.limit_ids, window_starts): moved by the authorisation (conditionally, for a hard limit: spent + held + amount <= cap), released by capture, void and expiry.';

COMMENT ON COLUMN spend_windows.over IS 'What decisions billed without a hold (or beyond it) took past a hard cap: the work was done and is billed in full; a product that wants no overshoot authorises first.';

COMMENT ON COLUMN spend_windows.reached_at IS 'When spent + held first reached a soft limit''s cap in this window: limit.reached, once per window.';

COMMENT ON COLUMN spend_windows.reached_enqueued_at IS 'When limit.reached was enqueued; NULL after reached_at: still to enqueue (outbox).';

COMMENT ON CONSTRAINT spend_windows_counts_check ON spend_windows IS 'Counts never go below zero: a hold is released from its windows at most once, by the transaction that moved it out of held.';

COMMENT ON CONSTRAINT spend_windows_reached_check ON spend_windows IS 'limit.reached is enqueued only once it happened.';

ALTER TABLE ONLY spend_windows
    ADD CONSTRAINT spend_windows_pkey PRIMARY KEY (account_id, limit_id, window_start);

COMMENT ON CONSTRAINT spend_windows_pkey ON spend_windows IS 'One window per (account, limit, start): every statement that counts finds the same row.';

CREATE INDEX spend_windows_reached_outbox_idx ON spend_windows USING btree (account_id) WHERE ((reached_at IS NOT NULL) AND (reached_enqueued_at IS NULL));

COMMENT ON INDEX spend_windows_reached_outbox_idx IS 'Finds the windows whose limit.reached is still to enqueue.';

-- ==== stripe_drift ========================================================================================
-- Standing proof that Stripe and the ledger agree (SPEC §20). The drift pass (internal/reconcile,
-- `onceledger reconcile --stripe`, and serve every STRIPE_RECONCILE_INTERVAL) lists the Stripe objects of a
-- window, matches each to its ledger effect by key, and every money-backed ledger credit of the window to
-- its Stripe object. What does not match is a row of stripe_drift, kept until a later pass finds it matched;
-- a window where everything matched is a row of stripe_drift_checkpoints. Neither table moves money or
-- guards it: they are the pass's report, written in one short transaction after every Stripe call of the
-- pass has answered.

CREATE TABLE stripe_drift (
    account_id text NOT NULL,
    reason text NOT NULL,
    object_id text NOT NULL,
    payment_intent text,
    stripe_amount bigint,
    ledger_amount bigint,
    currency text,
    detail text DEFAULT ''::text NOT NULL,
    event_id text,
    object_created timestamptz NOT NULL,
    found_at timestamptz DEFAULT now() NOT NULL,
    last_seen_at timestamptz DEFAULT now() NOT NULL,
    resolved_at timestamptz,
    CONSTRAINT stripe_drift_reason_check CHECK ((reason = ANY (ARRAY['missing_credit'::text, 'amount_differs'::text, 'unknown_payment'::text, 'missing_refund'::text, 'missing_dispute'::text, 'status_differs'::text]))),
    CONSTRAINT stripe_drift_resolved_check CHECK (((resolved_at IS NULL) OR (resolved_at >= found_at)))
);

COMMENT ON TABLE stripe_drift IS 'A difference between Stripe and the ledger found by the drift pass: a Stripe payment, refund or dispute of this deployment without its ledger effect (or with another amount or state), or a money-backed credit without its Stripe object. Open while resolved_at is NULL; a later pass that finds it matched resolves it.';

COMMENT ON COLUMN stripe_drift.account_id IS 'The account the drift is on: the order''s account for a Stripe object, the entry''s for a ledger credit. The empty string when no account is known (a Stripe object of this deployment whose order names none): a fixed placeholder rather than NULL, because it is part of the primary key, which on Citus must include the distribution column (SPEC §15). No foreign key to accounts, for the same reason.';

COMMENT ON COLUMN stripe_drift.reason IS 'missing_credit: a succeeded payment has no topup credit; amount_differs: its credit, refund or dispute entry moved another amount (or the payment was credited twice, or in another currency); unknown_payment: a money-backed credit whose Stripe object does not exist; missing_refund / missing_dispute: a refund or chargeback of one of our payments took nothing back; status_differs: the restore of a refund or dispute is missing although Stripe says it failed or was won, or posted although Stripe says otherwise, or a credited payment did not succeed.';

COMMENT ON COLUMN stripe_drift.object_id IS 'The Stripe object the drift is about: a payment''s PaymentIntent (a Checkout Session and its PaymentIntent are one payment, reported once, under the PaymentIntent), a refund, a dispute; for a credit naming no payment, its dedupe key.';

COMMENT ON COLUMN stripe_drift.stripe_amount IS 'What Stripe says moved, in minor units; NULL: no Stripe object.';

COMMENT ON COLUMN stripe_drift.ledger_amount IS 'What the ledger moved for it (the credits of a payment, the reversal of a refund or dispute), as a positive number of minor units; NULL: no entry.';

COMMENT ON COLUMN stripe_drift.event_id IS 'A stored, parked Stripe event of the object whose replay would post the missing effect; NULL when none is stored (the webhook never delivered it: missed-event recovery or a resend from Stripe brings it).';

COMMENT ON COLUMN stripe_drift.object_created IS 'When Stripe created the object; for a credit without one (unknown_payment), when the credit was posted.';

COMMENT ON COLUMN stripe_drift.last_seen_at IS 'When a pass last found this drift.';

COMMENT ON COLUMN stripe_drift.resolved_at IS 'When a later pass found the object matched; NULL while open. A drift found again is reopened.';

COMMENT ON CONSTRAINT stripe_drift_reason_check ON stripe_drift IS 'A drift is one of the six reasons of SPEC §20; nothing else.';

COMMENT ON CONSTRAINT stripe_drift_resolved_check ON stripe_drift IS 'A drift is resolved after it was found, never before.';

ALTER TABLE ONLY stripe_drift
    ADD CONSTRAINT stripe_drift_pkey PRIMARY KEY (account_id, reason, object_id);

COMMENT ON CONSTRAINT stripe_drift_pkey ON stripe_drift IS 'One row per account, reason and object: a pass that finds the same drift again refreshes its row (ON CONFLICT DO UPDATE), so re-runs add nothing. The account leads, for Citus (SPEC §15).';

CREATE INDEX stripe_drift_open_idx ON stripe_drift USING btree (object_id) WHERE (resolved_at IS NULL);

COMMENT ON INDEX stripe_drift_open_idx IS 'The open drift only (a few rows however long the history): what a pass resolves by object, what the report, the console and the gauge list.';

-- ==== stripe_drift_checkpoints ============================================================================

CREATE TABLE stripe_drift_checkpoints (
    window_start timestamptz NOT NULL,
    window_end timestamptz NOT NULL,
    objects integer NOT NULL,
    credits integer NOT NULL,
    digest text NOT NULL,
    created_at timestamptz DEFAULT now() NOT NULL,
    CONSTRAINT stripe_drift_checkpoints_counts_check CHECK (((objects >= 0) AND (credits >= 0))),
    CONSTRAINT stripe_drift_checkpoints_digest_check CHECK ((digest ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT stripe_drift_checkpoints_window_check CHECK ((window_end > window_start))
);

COMMENT ON TABLE stripe_drift_checkpoints IS 'A window in which the drift pass matched every Stripe object of this deployment to its ledger effect and every money-backed credit to its Stripe object: "drift 0", recorded. Deployment-wide, so it has no account; on Citus it is distributed by window_start.';

COMMENT ON COLUMN stripe_drift_checkpoints.objects IS 'Stripe objects matched: payments (a Checkout Session and its PaymentIntent counted once), refunds and disputes that move money.';

COMMENT ON COLUMN stripe_drift_checkpoints.credits IS 'Money-backed ledger credits posted in the window, all matched.';

COMMENT ON COLUMN stripe_drift_checkpoints.digest IS 'SHA-256 (hex) of the sorted match list (object, amount, the dedupe keys of its entries): two passes that matched the same things give the same digest.';

COMMENT ON CONSTRAINT stripe_drift_checkpoints_counts_check ON stripe_drift_checkpoints IS 'Counts are never negative.';

COMMENT ON CONSTRAINT stripe_drift_checkpoints_digest_check ON stripe_drift_checkpoints IS 'The digest is a SHA-256 in lower-case hex.';

COMMENT ON CONSTRAINT stripe_drift_checkpoints_window_check ON stripe_drift_checkpoints IS 'A window ends after it starts.';

ALTER TABLE ONLY stripe_drift_checkpoints
    ADD CONSTRAINT stripe_drift_checkpoints_pkey PRIMARY KEY (window_start, window_end);

COMMENT ON CONSTRAINT stripe_drift_checkpoints_pkey ON stripe_drift_checkpoints IS 'One checkpoint per window: the first clean pass records it (ON CONFLICT DO NOTHING); re-runs add nothing.';

-- ==== stripe_events =======================================================================================
-- A completion for an order that had already expired is parked order_expired: Stripe does not complete an
-- expired session, so a signed event saying so is investigated, never credited.

CREATE TABLE stripe_events (
    event_id text NOT NULL,
    seq bigint NOT NULL,
    type text NOT NULL,
    api_version text DEFAULT ''::text NOT NULL,
    livemode boolean NOT NULL,
    created timestamptz NOT NULL,
    payload jsonb NOT NULL,
    received_at timestamptz DEFAULT now() NOT NULL,
    outcome text NOT NULL,
    parked_reason text,
    payment_intent text,
    outcome_at timestamptz DEFAULT now() NOT NULL,
    reviewed_at timestamptz,
    reviewed_by text,
    CONSTRAINT stripe_events_outcome_check CHECK ((outcome = ANY (ARRAY['applied'::text, 'recorded'::text, 'ignored'::text, 'parked'::text]))),
    CONSTRAINT stripe_events_parked_reason_check CHECK ((((outcome = 'parked'::text) = (parked_reason IS NOT NULL)) AND (parked_reason = ANY (ARRAY['unknown_payment'::text, 'unknown_account'::text, 'currency_mismatch'::text, 'dedupe_conflict'::text, 'refund_list_unavailable'::text, 'amount_out_of_range'::text, 'livemode_mismatch'::text, 'amount_mismatch'::text, 'order_expired'::text])))),
    CONSTRAINT stripe_events_reviewed_by_check CHECK (((reviewed_by IS NULL) OR (reviewed_at IS NOT NULL)))
);

COMMENT ON TABLE stripe_events IS 'Every verified Stripe event, inserted in the same transaction as its effects. The primary key makes a redelivered event a no-op.';

COMMENT ON COLUMN stripe_events.seq IS 'Arrival order, for keyset pagination of the operator listing.';

COMMENT ON COLUMN stripe_events.outcome IS 'applied: its effects were posted (or already were, under their own keys); recorded: kept, never credited (payment_intent.succeeded, charge.succeeded); ignored: a type we do not handle; parked: kept for later.';

COMMENT ON COLUMN stripe_events.payment_intent IS 'The payment a refund or dispute event refers to, so that events parked as unknown_payment are re-applied when that payment is recorded.';

COMMENT ON COLUMN stripe_events.reviewed_at IS 'When an operator last looked at this parked event; verify reports parked events left unreviewed too long.';

COMMENT ON COLUMN stripe_events.reviewed_by IS 'The key name (or, from the command line, the operator) that last marked this parked event reviewed.';

COMMENT ON CONSTRAINT stripe_events_outcome_check ON stripe_events IS 'An event is applied, recorded, ignored or parked; nothing else (see the comment on the outcome column).';

COMMENT ON CONSTRAINT stripe_events_parked_reason_check ON stripe_events IS 'A parked event always says why, and only parked events have a reason: unknown_payment, unknown_account, currency_mismatch, dedupe_conflict, refund_list_unavailable, amount_out_of_range (above 10^15 or beyond a bigint balance), livemode_mismatch (test event on a live deployment or the reverse), amount_mismatch (paid amount or currency differs from the order), order_expired (a completion for an expired order).';

COMMENT ON CONSTRAINT stripe_events_reviewed_by_check ON stripe_events IS 'A reviewer goes with a review (reviews recorded before reviewers were named have none).';

ALTER TABLE stripe_events ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME stripe_events_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY stripe_events
    ADD CONSTRAINT stripe_events_pkey PRIMARY KEY (event_id);

COMMENT ON CONSTRAINT stripe_events_pkey ON stripe_events IS 'A Stripe event is processed at most once: its id is inserted with ON CONFLICT DO NOTHING in the transaction that applies it, so a redelivery finds it and does nothing.';

ALTER TABLE ONLY stripe_events
    ADD CONSTRAINT stripe_events_seq_key UNIQUE (seq);

COMMENT ON CONSTRAINT stripe_events_seq_key ON stripe_events IS 'One arrival position per event, so that paging the operator listing by seq never repeats or skips one.';

CREATE INDEX stripe_events_outcome_seq_idx ON stripe_events USING btree (outcome, seq);

COMMENT ON INDEX stripe_events_outcome_seq_idx IS 'Serves the operator listing filtered by outcome (e.g. parked), in arrival order.';

CREATE INDEX stripe_events_parked_payment_idx ON stripe_events USING btree (payment_intent) WHERE (outcome = 'parked'::text);

COMMENT ON INDEX stripe_events_parked_payment_idx IS 'Finds the events waiting for a payment when that payment is recorded.';

-- ==== topups ==============================================================================================
-- The order is the contract: a Checkout Session that expires unpaid expires its order, and a client that
-- retries POST /v1/accounts/{id}/topups with the same Idempotency-Key gets the same order (and so the same
-- Checkout Session) instead of a second one. An order buys `credits` for `amount` (the price, in the minor
-- units of the order's currency): the credit is exactly the credits, and the lot it makes records what was
-- paid for it (cost_amount in cost_currency).

CREATE TABLE topups (
    id text NOT NULL,
    account_id text NOT NULL,
    session_id text,
    payment_intent text,
    amount bigint NOT NULL,
    currency text NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    checkout_url text,
    paid_event_id text,
    created_at timestamptz DEFAULT now() NOT NULL,
    paid_at timestamptz,
    idempotency_key text,
    request_fingerprint text,
    credits bigint NOT NULL,
    CONSTRAINT topups_amount_positive_check CHECK ((amount > 0)),
    CONSTRAINT topups_credits_positive_check CHECK ((credits > 0)),
    CONSTRAINT topups_idempotency_consistent_check CHECK ((((idempotency_key IS NULL) = (request_fingerprint IS NULL)) AND ((length(idempotency_key) >= 1) AND (length(idempotency_key) <= 255)))),
    CONSTRAINT topups_paid_consistent_check CHECK (((status = 'paid'::text) = ((paid_at IS NOT NULL) AND (paid_event_id IS NOT NULL)))),
    CONSTRAINT topups_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'paid'::text, 'expired'::text])))
);

COMMENT ON TABLE topups IS 'A top-up order: one Stripe Checkout Session (or one recharge) buying credits for one account. It becomes paid at most once: from pending by a conditional UPDATE ... WHERE status = ''pending'', or, for a session the webhook learns of first, by an INSERT of the order already paid, which topups_session_id_key admits once per session. The credit is posted only in the transaction that made the order paid.';

COMMENT ON COLUMN topups.amount IS 'The price: what the payment must be, in the minor units of currency. Paid exactly, or not at all.';

COMMENT ON COLUMN topups.status IS 'pending until the webhook''s conditional UPDATE ... WHERE status = ''pending'' makes it paid (at most once; only the transaction that made that transition posts the credit) or expired (checkout.session.expired). A completion arriving for an expired order credits nothing and is parked order_expired.';

COMMENT ON COLUMN topups.idempotency_key IS 'The caller''s Idempotency-Key of the API request that created the order; NULL when none was sent or the webhook recorded the order.';

COMMENT ON COLUMN topups.request_fingerprint IS 'A digest of the request body sent with idempotency_key: the same key with another body is a conflict.';

COMMENT ON COLUMN topups.credits IS 'What the order buys: the credit posted when it is paid (orders before migration 000024: the amount).';

COMMENT ON CONSTRAINT topups_amount_positive_check ON topups IS 'An order buys a positive number of minor units.';

COMMENT ON CONSTRAINT topups_credits_positive_check ON topups IS 'An order buys a positive number of credits.';

COMMENT ON CONSTRAINT topups_idempotency_consistent_check ON topups IS 'An idempotency key always comes with the fingerprint of its request, and is 1-255 characters.';

COMMENT ON CONSTRAINT topups_paid_consistent_check ON topups IS 'A paid order records when and by which event it was paid; a pending one records neither.';

COMMENT ON CONSTRAINT topups_status_check ON topups IS 'An order is pending, paid or expired; nothing else. pending -> paid and pending -> expired are conditional UPDATEs (WHERE status = ''pending''), so an order ends one way, once.';

ALTER TABLE ONLY topups
    ADD CONSTRAINT topups_account_id_key UNIQUE (account_id, id);

COMMENT ON CONSTRAINT topups_account_id_key ON topups IS 'An order under its account: what recharge_attempts_topup_fk references (it stays unique on a sharded deployment, where (id) alone cannot).';

-- account_id leads this key, as SPEC §15 asks of every unique key of a table distributed by account; the
-- order's other keys (its id, session and payment) are made per account on Citus by sql/citus/prepare.sql,
-- the session and the payment then claimed across accounts in dedupe_claims (the id is minted by the
-- service, or is the session's).
ALTER TABLE ONLY topups
    ADD CONSTRAINT topups_idempotency_key UNIQUE (account_id, idempotency_key);

COMMENT ON CONSTRAINT topups_idempotency_key ON topups IS 'One order per account and Idempotency-Key: a retried request, even concurrent, finds the first order instead of creating a second Checkout Session.';

ALTER TABLE ONLY topups
    ADD CONSTRAINT topups_payment_intent_key UNIQUE (payment_intent);

COMMENT ON CONSTRAINT topups_payment_intent_key ON topups IS 'One order per payment: refunds and disputes find their account through it.';

ALTER TABLE ONLY topups
    ADD CONSTRAINT topups_pkey PRIMARY KEY (id);

COMMENT ON CONSTRAINT topups_pkey ON topups IS 'One order per id; the id is named in the Checkout Session''s metadata (topup_id).';

ALTER TABLE ONLY topups
    ADD CONSTRAINT topups_session_id_key UNIQUE (session_id);

COMMENT ON CONSTRAINT topups_session_id_key ON topups IS 'One order per Checkout Session.';

-- ==== Functions ===========================================================================================
-- Every function that refuses a change (ledger_refuse_change, audit_log_refuse_change, ...) names the
-- constraint and the table it holds in its error (and, on Citus, in its detail, the one field Citus relays
-- from a shard), so that the application recognises a refused change by the constraint's name and its table
-- rather than by the wording of the message (db.MapError).

-- The database decides when to recharge and alert: the deferred trigger accounts_available_watch is queued
-- by every UPDATE of accounts that moves balance or held of an account that watches (recharge on, or an
-- alert threshold), which is how every debit moves money (ledger_chain_advance moves the balance of single
-- posts, group commits and billing chunks; holds move held), so no debit path calls anything for it. It runs
-- at commit, inside the debit's transaction, on the account as the transaction leaves it. Where each
-- guarantee is held:
--   * one attempt per (episode, retry): recharge_attempts_episode_key. The episode (recharge_episode)
--     advances only when available rises to the threshold or above after an attempt or a block in it;
--   * at most the budget's count and amount per window: recharge_windows_budget_check, on the window row
--     moved by a conditional upsert in the debit's own transaction (no prior read); a refused upsert creates
--     no attempt;
--   * the cooldown: accounts.recharge_next_eligible_at, claimed by a conditional UPDATE of the account row
--     (the row the debit locked), given back when the budget refuses;
--   * one recharge.blocked per (account, episode, reason): recharge_blocks_pkey;
--   * one alert of each kind per (account, threshold, episode): balance_alerts_pkey, the episode advanced
--     by the recovery.
CREATE FUNCTION accounts_available_watch() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    a accounts;
    charge bigint;
    w_start timestamptz;
    admitted boolean;
    moved text;
BEGIN
    -- The account as the transaction leaves it (the trigger runs at commit; the row is locked by the
    -- update that queued it, so no other transaction makes an attempt for it meanwhile).
    SELECT * INTO a FROM accounts WHERE id = NEW.id;

    IF a.recharge_enabled AND a.balance - a.held < a.recharge_threshold
       AND NOT EXISTS (SELECT 1 FROM recharge_attempts r
                       WHERE r.account_id = a.id AND r.episode = a.recharge_episode AND r.retry = a.recharge_retry) THEN
        -- Below the threshold, and this try of the episode not made yet. fixed: the amount; target: what
        -- brings available (holds and debt counted) back to the target, at least Stripe's minimum charge.
        charge := CASE a.recharge_mode
                      WHEN 'fixed' THEN a.recharge_amount
                      ELSE greatest(a.recharge_target - (a.balance - a.held),
                                    CASE lower(a.currency)
                                        WHEN 'gbp' THEN 30 WHEN 'hkd' THEN 400 WHEN 'dkk' THEN 250
                                        WHEN 'nok' THEN 300 WHEN 'sek' THEN 300 WHEN 'czk' THEN 1500
                                        WHEN 'huf' THEN 17500 WHEN 'mxn' THEN 1000 WHEN 'thb' THEN 1000
                                        WHEN 'aed' THEN 200 WHEN 'pln' THEN 200 WHEN 'ron' THEN 200
                                        WHEN 'myr' THEN 200 WHEN 'bgn' THEN 100
                                        ELSE 50 END)
                  END;
        -- The cooldown: the attempt claims the time until the next one, if that time has come.
        UPDATE accounts
        SET recharge_next_eligible_at = now() + a.recharge_cooldown
        WHERE id = a.id
          AND (recharge_next_eligible_at IS NULL OR recharge_next_eligible_at <= now());
        admitted := FOUND;
        IF NOT admitted THEN
            INSERT INTO recharge_blocks (account_id, episode, reason, next_eligible_at)
            VALUES (a.id, a.recharge_episode, 'cooling_down', a.recharge_next_eligible_at)
            ON CONFLICT ON CONSTRAINT recharge_blocks_pkey DO NOTHING;
            moved := CASE WHEN FOUND THEN 'blocked' END;
        ELSIF a.recharge_budget_period IS NOT NULL THEN
            -- The budget: the window admits the attempt by a conditional upsert.
            w_start := date_trunc(a.recharge_budget_period, now(), 'UTC');
            INSERT INTO recharge_windows AS w
                (account_id, period, window_start, attempts, recharged_amount, max_attempts, max_amount)
            SELECT a.id, a.recharge_budget_period, w_start, 1, charge, a.recharge_budget_count, a.recharge_budget_amount
            WHERE charge <= coalesce(a.recharge_budget_amount, charge)
            ON CONFLICT ON CONSTRAINT recharge_windows_pkey DO UPDATE
            SET attempts = w.attempts + 1,
                recharged_amount = w.recharged_amount + excluded.recharged_amount,
                max_attempts = excluded.max_attempts,
                max_amount = excluded.max_amount
            WHERE w.attempts < coalesce(excluded.max_attempts, w.attempts + 1)
              AND w.recharged_amount + excluded.recharged_amount
                  <= coalesce(excluded.max_amount, w.recharged_amount + excluded.recharged_amount);
            admitted := FOUND;
            IF NOT admitted THEN
                -- Refused: no attempt, so the cooldown it claimed is given back.
                UPDATE accounts SET recharge_next_eligible_at = a.recharge_next_eligible_at WHERE id = a.id;
                INSERT INTO recharge_blocks (account_id, episode, reason, next_eligible_at)
                VALUES (a.id, a.recharge_episode, 'budget_exhausted',
                        w_start + ('1 ' || a.recharge_budget_period)::interval)
                ON CONFLICT ON CONSTRAINT recharge_blocks_pkey DO NOTHING;
                moved := CASE WHEN FOUND THEN 'blocked' END;
            END IF;
        END IF;
        IF admitted THEN
            -- The attempt and the pending order it owns.
            WITH attempt AS (
                INSERT INTO recharge_attempts (account_id, id, episode, retry, topup_id, amount)
                SELECT a.id, s.id, a.recharge_episode, a.recharge_retry, 'rch_' || s.id, charge
                FROM (SELECT nextval('recharge_attempts_id_seq') AS id) s
                RETURNING account_id, topup_id, amount
            )
            INSERT INTO topups (id, account_id, amount, currency)
            SELECT topup_id, account_id, amount, a.currency
            FROM attempt;
            moved := 'attempt_requested';
        END IF;
    ELSIF a.recharge_threshold IS NOT NULL AND a.balance - a.held >= a.recharge_threshold THEN
        -- Back at the threshold or above after an attempt or a block: the next dip is a new episode.
        UPDATE accounts
        SET recharge_episode = recharge_episode + 1, recharge_retry = 0
        WHERE id = a.id
          AND (EXISTS (SELECT 1 FROM recharge_attempts r WHERE r.account_id = a.id AND r.episode = a.recharge_episode)
               OR EXISTS (SELECT 1 FROM recharge_blocks b WHERE b.account_id = a.id AND b.episode = a.recharge_episode));
        moved := CASE WHEN FOUND THEN 'episode_ended' END;
    END IF;
    IF moved IS NOT NULL THEN
        -- An attempt, a block or a new episode: the status they change, told once.
        PERFORM recharge_status_sync(a.id, moved);
    END IF;

    IF a.low_balance_alert IS NULL THEN
        RETURN NULL;
    ELSIF a.balance - a.held < a.low_balance_alert THEN
        -- Below the alert threshold: balance.low, once per episode.
        INSERT INTO balance_alerts (account_id, threshold, episode, low_available)
        VALUES (a.id, a.low_balance_alert, a.alert_episode, a.balance - a.held)
        ON CONFLICT ON CONSTRAINT balance_alerts_pkey DO NOTHING;
    ELSE
        -- Back at or above it after a low alert: balance.recovered, and the next dip is a new episode.
        WITH recovered AS (
            UPDATE balance_alerts
            SET recovered_at = now(), recovered_available = a.balance - a.held
            WHERE account_id = a.id
              AND threshold = a.low_balance_alert
              AND episode = a.alert_episode
              AND recovered_at IS NULL
            RETURNING account_id
        )
        UPDATE accounts
        SET alert_episode = alert_episode + 1
        WHERE id IN (SELECT account_id FROM recovered);
    END IF;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION accounts_available_watch() IS 'At commit, for an account whose balance, held or retry the transaction moved: below its recharge threshold with the episode''s current try not made, claims the cooldown and the budget window by conditional statements and inserts the attempt with its pending order, or records why not (recharge_blocks); at or above it after an attempt or block, starts the next episode; and moves the recharge status those change (recharge_status_sync). Likewise records balance.low / balance.recovered once per alert episode.';

-- Every path that writes an account's entries or holds takes its row first, in this one order: roots first,
-- by depth, then id (for accounts without pools, all of depth 0: id order). A cascade locks a member with
-- its pools, and every other path locks in the same order, so that they queue instead of deadlocking.
CREATE FUNCTION accounts_lock(p_ids text[], p_balance bigint DEFAULT NULL::bigint) RETURNS TABLE(id text, last_seq bigint, balance bigint, held bigint)
    LANGUAGE sql
    AS $$
SELECT a.id, a.last_seq, a.balance, a.held
FROM accounts a
WHERE a.id = ANY(p_ids)
  AND (p_balance IS NULL OR a.balance = p_balance)
ORDER BY a.depth, a.id
FOR NO KEY UPDATE;
$$;

COMMENT ON FUNCTION accounts_lock(p_ids text[], p_balance bigint) IS 'Locks the existing accounts among p_ids roots first, by depth then id (FOR NO KEY UPDATE: other entries'' foreign-key checks stay free) and returns them as locked. With p_balance, only an account whose balance is still p_balance is locked and returned: after waiting for another transaction''s lock, the balance is checked again on the row that transaction left. On Citus (sql/citus) one row lock per account, in the same order.';

-- The rules of the tree a foreign key cannot say. The parent's existence is held here as well, raised as
-- accounts_parent_fk: accounts are distributed by id on Citus, where a foreign key to another shard is not
-- possible, so one trigger holds it on both backends. It walks up from the parent one row at a time (at most
-- three, each a single-row read, a router query on Citus), so no recursive query is needed.
CREATE FUNCTION accounts_parent_tree() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    parent_currency text;
    parent_unit     text;
    parent_depth    smallint;
    ancestor        text;
    steps           int := 0;
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF EXISTS (SELECT 1 FROM accounts c WHERE c.parent_id = OLD.id) THEN
            RAISE EXCEPTION 'account % has members: it stays', OLD.id
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'accounts_parent_fk',
                      TABLE = 'accounts', DETAIL = 'constraint accounts_parent_fk on table accounts';
        END IF;
        RETURN OLD;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.parent_id IS NOT DISTINCT FROM OLD.parent_id
       AND NEW.currency = OLD.currency AND NEW.depth = OLD.depth THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'INSERT' AND NEW.parent_id IS NOT NULL AND EXISTS (SELECT 1 FROM accounts a WHERE a.id = NEW.id) THEN
        -- The id exists: the insert does nothing (ON CONFLICT) or fails on accounts_pkey, and the
        -- existing account's parent is not this row's to judge (a caller compares them). Its CHECKs run
        -- before the conflict is found: a depth they accept, for a row never written.
        NEW.depth := 1;
        RETURN NEW;
    END IF;
    IF NEW.parent_id IS NULL OR NEW.parent_id = NEW.id THEN
        -- A root, or its own parent: accounts_parent_not_self_check refuses that one (depth 1, so that
        -- accounts_depth_check does not answer first).
        NEW.depth := CASE WHEN NEW.parent_id IS NULL THEN 0 ELSE 1 END;
        IF TG_OP = 'UPDATE' AND NEW.currency <> OLD.currency
           AND EXISTS (SELECT 1 FROM accounts c WHERE c.parent_id = NEW.id) THEN
            RAISE EXCEPTION 'account % has members: its currency stays %', NEW.id, OLD.currency
                USING ERRCODE = 'check_violation', CONSTRAINT = 'accounts_parent_currency_check',
                      TABLE = 'accounts', DETAIL = 'constraint accounts_parent_currency_check on table accounts';
        END IF;
        IF TG_OP = 'UPDATE' AND OLD.parent_id IS NOT NULL THEN
            RAISE EXCEPTION 'account % has parent %: it never changes', NEW.id, OLD.parent_id
                USING ERRCODE = 'check_violation', CONSTRAINT = 'accounts_parent_immutable',
                      TABLE = 'accounts', DETAIL = 'constraint accounts_parent_immutable on table accounts';
        END IF;
        RETURN NEW;
    END IF;

    SELECT p.currency, p.unit, p.depth INTO parent_currency, parent_unit, parent_depth FROM accounts p WHERE p.id = NEW.parent_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'parent % of account % does not exist', NEW.parent_id, NEW.id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'accounts_parent_fk',
                  TABLE = 'accounts', DETAIL = 'constraint accounts_parent_fk on table accounts';
    END IF;
    -- A member draws its pool's balance as its own: the same currency, and the same unit (000024).
    IF parent_currency <> NEW.currency OR parent_unit <> NEW.unit THEN
        RAISE EXCEPTION 'account % is % (%), its parent % is % (%)', NEW.id, NEW.currency, NEW.unit,
                        NEW.parent_id, parent_currency, parent_unit
            USING ERRCODE = 'check_violation', CONSTRAINT = 'accounts_parent_currency_check',
                  TABLE = 'accounts', DETAIL = 'constraint accounts_parent_currency_check on table accounts';
    END IF;
    -- A cycle: the account is among its new parent's ancestors.
    ancestor := NEW.parent_id;
    WHILE ancestor IS NOT NULL AND steps <= 3 LOOP
        IF ancestor = NEW.id THEN
            RAISE EXCEPTION 'account % would be its own ancestor through %', NEW.id, NEW.parent_id
                USING ERRCODE = 'check_violation', CONSTRAINT = 'accounts_parent_acyclic_check',
                      TABLE = 'accounts', DETAIL = 'constraint accounts_parent_acyclic_check on table accounts';
        END IF;
        SELECT a.parent_id INTO ancestor FROM accounts a WHERE a.id = ancestor;
        steps := steps + 1;
    END LOOP;
    IF TG_OP = 'UPDATE' AND OLD.parent_id IS DISTINCT FROM NEW.parent_id THEN
        RAISE EXCEPTION 'account % has parent %: it never changes', NEW.id, coalesce(OLD.parent_id, '(none)')
            USING ERRCODE = 'check_violation', CONSTRAINT = 'accounts_parent_immutable',
                  TABLE = 'accounts', DETAIL = 'constraint accounts_parent_immutable on table accounts';
    END IF;
    -- The depth is the parent's plus one; beyond 2, accounts_depth_check refuses the row.
    NEW.depth := parent_depth + 1;
    RETURN NEW;
END;
$$;

COMMENT ON FUNCTION accounts_parent_tree() IS 'Trigger accounts_parent_tree: derives depth from the parent and refuses, by constraint name, a parent that does not exist or the deletion of one that has members (accounts_parent_fk), of another currency or unit (accounts_parent_currency_check), a cycle (accounts_parent_acyclic_check), a parent set or changed after creation (accounts_parent_immutable) and a currency change of a pool with members.';

CREATE FUNCTION audit_log_refuse_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'the audit trail is append-only: % refused', TG_OP
        USING ERRCODE = 'restrict_violation',
              CONSTRAINT = 'audit_log_append_only',
              TABLE = 'audit_log',
              -- Citus relays a shard's error without its constraint and table fields, but with its detail.
              DETAIL = 'constraint audit_log_append_only on table audit_log';
END;
$$;

COMMENT ON FUNCTION audit_log_refuse_change() IS 'Raises restrict_violation naming constraint audit_log_append_only for any UPDATE, DELETE or TRUNCATE of the audit trail.';

-- ledger_keys_taken and claim_keys hold "at most once" for a posting's dedupe keys, and claim_keys for every
-- other key the service promises unique across accounts. On plain PostgreSQL the tables' own unique keys do
-- it: ledger_keys_taken reads ledger_dedupe_idx, and claim_keys has nothing to claim. On Citus those keys are
-- per account (the distribution column leads every unique key), and both go through dedupe_claims.
CREATE FUNCTION claim_keys(p_keys text[], p_account_ids text[]) RETURNS SETOF text
    LANGUAGE sql IMMUTABLE
    AS $$
SELECT unnest(p_keys);
$$;

COMMENT ON FUNCTION claim_keys(p_keys text[], p_account_ids text[]) IS 'The keys among p_keys (each for the account beside it) this transaction may write under: a ledger entry''s dedupe key, or a prefixed id the service promises unique across accounts (decisions:{id}). On plain PostgreSQL every one: the table''s own unique key checks the write itself. On Citus (sql/citus) the keys claimed in dedupe_claims.';

-- For a key whose reuse is an error, not a silent no-op (a payment paying a second order): when a key is
-- taken it fails as the table's own unique key fails on plain PostgreSQL, with the same SQLSTATE, table and
-- constraint, so that the application reads one answer on either backend.
CREATE FUNCTION claim_unique(p_keys text[], p_account_ids text[], p_table text, p_constraint text) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    claimed integer;
BEGIN
    SELECT count(*) INTO claimed FROM claim_keys(p_keys, p_account_ids);
    IF claimed < coalesce(cardinality(p_keys), 0) THEN
        RAISE EXCEPTION 'duplicate key value violates unique constraint "%"', p_constraint
            USING ERRCODE = 'unique_violation', TABLE = p_table, CONSTRAINT = p_constraint;
    END IF;
    RETURN claimed;
END;
$$;

COMMENT ON FUNCTION claim_unique(p_keys text[], p_account_ids text[], p_table text, p_constraint text) IS 'Claims p_keys (claim_keys) in the writing transaction, and raises unique_violation naming p_table and p_constraint when one is taken already: a unique key across accounts that Citus cannot hold as an index.';

CREATE FUNCTION hold_reservations_append_only() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'hold reservations are never changed: % refused', TG_OP
        USING ERRCODE = 'restrict_violation', CONSTRAINT = 'hold_reservations_append_only',
              TABLE = 'hold_reservations', DETAIL = 'constraint hold_reservations_append_only on table hold_reservations';
END;
$$;

COMMENT ON FUNCTION hold_reservations_append_only() IS 'Raises restrict_violation naming constraint hold_reservations_append_only for any UPDATE or DELETE.';

-- A function of its own, in PL/pgSQL so that it is never inlined: Citus evaluates now() once, on the
-- coordinator, only where it is not inside a CASE, and refuses an UPDATE whose CASE calls it.
CREATE FUNCTION holds_resolution(p_expires_at timestamptz, p_at timestamptz) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    RETURN CASE WHEN p_expires_at > p_at THEN 'voided' ELSE 'expired' END;
END;
$$;

COMMENT ON FUNCTION holds_resolution(p_expires_at timestamptz, p_at timestamptz) IS 'The state a held hold that expires at p_expires_at moves to when voided at p_at: voided, or expired when its time is up (what the expiry pass would do).';

-- The one road (SPEC §21): every path that writes the ledger (a single posting, group commit, the webhook's
-- group of Checkout Sessions, billing, hold captures, lot expiry and voids, refund and dispute restores,
-- the parts of a cascade) hands its planned rows to ledger_append, which alone inserts entries. Lock order,
-- seq, balance_after, the no-overdraw rule and the dedupe key are written once, here; the paths differ only
-- in how they plan their rows (in Go, or set-based from decisions or lots in the statement that calls it).
-- It is the same function on both backends (SPEC §15); what differs is what it calls: accounts_lock,
-- ledger_keys_taken, claim_keys and ledger_batches, which sql/citus/prepare.sql gives their Citus forms under
-- the same names (as it does stripe_events_lock_parked).
--
-- The arrays are one planned row each, read in lockstep (those after the first five may be left out: NULL):
-- the account, kind, amount, description, dedupe key ('' or NULL: none), payment intent ('' or NULL: none),
-- whether the row may not take its account's balance below zero, the lot an expiry or void takes (0 or
-- NULL: none), the key of the reversal a restore undoes ('' or NULL: none), and for a credit (ignored for a
-- debit) the terms of its lot: category ('' or NULL: the default) and priority (NULL: the default), expiry
-- as a timestamp ('' or NULL: none) or else as a lifetime in seconds from the entry's created_at (0 or NULL:
-- never); after p_balance, who spent (subject) and on what (feature): those of the hold or decision the row
-- is posted for ('' or NULL: none); then what a credit's lot cost: its amount (NULL: 0) and currency ('' or
-- NULL: nothing was paid; the amount is then ignored); last, the member a pool's row pays for ('' or NULL:
-- none).
CREATE FUNCTION ledger_append(p_account_ids text[], p_kinds text[], p_amounts bigint[], p_descriptions text[], p_dedupe_keys text[], p_payment_intents text[] DEFAULT NULL::text[], p_no_overdraw boolean[] DEFAULT NULL::boolean[], p_lot_ids bigint[] DEFAULT NULL::bigint[], p_reverses text[] DEFAULT NULL::text[], p_lot_categories text[] DEFAULT NULL::text[], p_lot_priorities smallint[] DEFAULT NULL::smallint[], p_lot_expires_at text[] DEFAULT NULL::text[], p_lot_ttls double precision[] DEFAULT NULL::double precision[], p_balance bigint DEFAULT NULL::bigint, p_subjects text[] DEFAULT NULL::text[], p_features text[] DEFAULT NULL::text[], p_lot_cost_amounts bigint[] DEFAULT NULL::bigint[], p_lot_cost_currencies text[] DEFAULT NULL::text[], p_on_behalf_of text[] DEFAULT NULL::text[]) RETURNS TABLE(k bigint, id bigint, account_id text, kind text, amount bigint, description text, dedupe_key text, payment_intent text, seq bigint, balance_after bigint, created_at timestamptz, lot_id bigint, reverses_entry_id bigint, subject text, feature text, on_behalf_of text)
    LANGUAGE plpgsql
    AS $$
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
                                 subject, feature, lot_cost_amount, lot_cost_currency, on_behalf_of)
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
               CASE WHEN p_amounts[r.k] > 0 THEN nullif(p_lot_cost_currencies[r.k], '') END,
               nullif(p_on_behalf_of[r.k], '')
        FROM planned r
        ORDER BY r.account_id, r.seq
        ON CONFLICT DO NOTHING
        RETURNING l.id, l.account_id, l.kind, l.amount, l.description, l.dedupe_key, l.payment_intent, l.seq,
                  l.balance_after, l.created_at, l.lot_id, l.reverses_entry_id, l.subject, l.feature, l.on_behalf_of
    )
    SELECT r.k, i.id, i.account_id, i.kind, i.amount, i.description, i.dedupe_key, i.payment_intent, i.seq,
           i.balance_after, i.created_at, i.lot_id, i.reverses_entry_id, i.subject, i.feature, i.on_behalf_of
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
               g.seq, g.balance_after, g.created_at, g.lot_id, g.reverses_entry_id, g.subject, g.feature,
               g.on_behalf_of
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
$$;

COMMENT ON FUNCTION ledger_append(p_account_ids text[], p_kinds text[], p_amounts bigint[], p_descriptions text[], p_dedupe_keys text[], p_payment_intents text[], p_no_overdraw boolean[], p_lot_ids bigint[], p_reverses text[], p_lot_categories text[], p_lot_priorities smallint[], p_lot_expires_at text[], p_lot_ttls double precision[], p_balance bigint, p_subjects text[], p_features text[], p_lot_cost_amounts bigint[], p_lot_cost_currencies text[], p_on_behalf_of text[]) IS 'The one road into the ledger: inserts planned entries (arrays in lockstep) after locking their accounts in id order, numbering each account''s rows from last_seq with balance_after from the locked balance, leaving out rows whose key is taken and the rows of an account whose no-overdraw row would go below zero, then posts the at-once expiry of any lot a restore refilled after it closed. Stores on each entry the subject and feature of the hold or decision it is posted for, on a credit what its lot cost, and on a pool''s entry the member it paid for (on_behalf_of). Returns each inserted entry with the position (k) of its planned row; an entry it posted on its own (that expiry) has k NULL.';

CREATE FUNCTION ledger_batches(p_account_ids text[]) RETURNS SETOF text[]
    LANGUAGE sql IMMUTABLE
    AS $$
SELECT p_account_ids;
$$;

COMMENT ON FUNCTION ledger_batches(p_account_ids text[]) IS 'The accounts of a posting in the batches ledger_append inserts their entries in: on plain PostgreSQL all of them at once, in one statement; on Citus (sql/citus) one batch per shard, so that each statement runs on its shard, where the entries'' triggers run.';

CREATE FUNCTION ledger_chain_advance() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    posted_accounts bigint;
    moved_accounts  bigint;
BEGIN
    WITH steps AS (
        SELECT account_id, seq, amount, balance_after,
               -- Each entry continues the one before it in the statement.
               coalesce(balance_after - amount = lag(balance_after) OVER w, true) AS linked,
               CASE WHEN lead(seq) OVER w IS NULL THEN balance_after END AS closing
        FROM new_entries
        WINDOW w AS (PARTITION BY account_id ORDER BY seq)
    ), per_account AS (
        SELECT account_id, count(*) AS entries, min(seq) AS first_seq, max(seq) AS last_seq,
               sum(amount::numeric) AS total, bool_and(linked) AS linked, max(closing) AS closing
        FROM steps
        GROUP BY account_id
    ), moved AS (
        -- Contiguous from last_seq + 1 (ledger_account_seq_key forbids repeats), linked within the
        -- statement, and closing at balance + total, which makes the first entry start at the balance.
        UPDATE accounts a
        SET balance = p.closing, last_seq = p.last_seq
        FROM per_account p
        WHERE a.id = p.account_id
          AND p.linked
          AND p.first_seq = a.last_seq + 1
          AND p.last_seq = a.last_seq + p.entries
          AND p.closing = a.balance + p.total
        RETURNING a.id
    )
    SELECT (SELECT count(*) FROM per_account), (SELECT count(*) FROM moved)
    INTO posted_accounts, moved_accounts;
    IF moved_accounts <> posted_accounts THEN
        RAISE EXCEPTION 'ledger entries do not continue their account''s chain'
            USING ERRCODE = 'check_violation',
                  CONSTRAINT = 'ledger_chain',
                  TABLE = TG_TABLE_NAME,
                  HINT = 'seq must run from accounts.last_seq + 1 without holes, and balance_after from '
                         'accounts.balance by each amount; lock the account row before inserting.';
    END IF;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION ledger_chain_advance() IS 'After each INSERT statement on the ledger: moves accounts.balance and last_seq by the inserted entries, or raises check_violation naming constraint ledger_chain on table ledger when they do not continue their account''s chain exactly.';

CREATE FUNCTION ledger_keys_taken(p_keys text[]) RETURNS SETOF text
    LANGUAGE sql STABLE
    AS $$
SELECT l.dedupe_key FROM ledger l WHERE l.dedupe_key = ANY(p_keys);
$$;

COMMENT ON FUNCTION ledger_keys_taken(p_keys text[]) IS 'The keys among p_keys that entries hold already (ledger_dedupe_idx): postings under them are replays or conflicts, never inserted again.';

CREATE FUNCTION ledger_lots_apply() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

COMMENT ON FUNCTION ledger_lots_apply() IS 'After each INSERT statement on the ledger (after ledger_chain): credits make lots on their terms and cost (and repay debt), debits draw lots in draw order, refunds and disputes their payment''s lot first, restores refill what their reversal drew, expiry and void entries take and close their lot, and every movement of a priced lot writes its revenue_recognitions row. Plain debits only: one set-based allocation for the whole statement; plain credits on accounts without debt: one insert of their lots.';

CREATE FUNCTION ledger_refuse_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'ledger entries are append-only: % refused', TG_OP
        USING ERRCODE = 'restrict_violation',
              CONSTRAINT = 'ledger_append_only',
              TABLE = TG_TABLE_NAME,
              HINT = 'Post a compensating entry instead.';
END;
$$;

COMMENT ON FUNCTION ledger_refuse_change() IS 'Raises restrict_violation naming constraint ledger_append_only on table ledger for any UPDATE, DELETE or TRUNCATE of the ledger.';

-- The one place for the per-entry lot rules, called by ledger_lots_apply (on either backend) for the
-- statements its set-based paths do not cover. It reads what the entry says: the lot an expiry or void takes
-- (lot_id), the reversal a restore undoes (reverses_entry_id), the lot a credit makes (lot_category,
-- lot_priority, lot_expires_at, lot_cost_*). Nothing here inserts an entry: a refilled lot closed or past
-- its expiry is only closed, and ledger_append posts its expiry. A restore's refills are read by one query
-- and written lot by lot, each statement on the account's rows alone, and a priced lot's recognition takes
-- its account from the lot's row: on Citus, where this runs on a ledger shard, each is a router statement run
-- where the lot is. One statement of data-modifying CTEs would be planned there as a distributed subplan,
-- whose result, named by plan numbers counted per process, could replace a coordinator's subplan of the same
-- transaction.
CREATE FUNCTION lots_apply_entry(e ledger) RETURNS void
    LANGUAGE plpgsql
    AS $$
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

COMMENT ON FUNCTION lots_apply_entry(e ledger) IS 'One entry''s lot work, under its account''s lock: a credit makes its lot on the entry''s terms and cost (and repays debt), a debit draws in draw order (a refund or dispute its payment''s lot first), a restore refills what its reversal drew (closing a refilled lot that is closed or past its expiry), an expiry or void entry takes and closes its lot; every movement of a priced lot writes its revenue_recognitions row.';

-- One statement of running sums: the demands in seq order per account against the lots' remaining in draw
-- order, each overlap of the two running intervals a draw, and each draw of a priced lot a recognition.
CREATE FUNCTION lots_draw(p_accounts text[], p_entries bigint[], p_seqs bigint[], p_needs bigint[], p_first_lot bigint, p_repay boolean, p_kinds text[], p_postings bigint[], p_ats timestamptz[]) RETURNS void
    LANGUAGE sql
    AS $$
WITH demand AS (
    SELECT d.account_id, d.entry_id, d.seq, d.need,
           CASE d.kind WHEN 'refund' THEN 'refunded' WHEN 'dispute' THEN 'disputed' ELSE 'recognised' END AS recognition,
           d.posting, d.at,
           sum(d.need) OVER (PARTITION BY d.account_id ORDER BY d.seq ROWS UNBOUNDED PRECEDING) - d.need AS lo
    FROM unnest(p_accounts, p_entries, p_seqs, p_needs, p_kinds, p_postings, p_ats)
        AS d (account_id, entry_id, seq, need, kind, posting, at)
    -- A member's part of 0 (its pools paid it all) draws nothing: inside a lot, it would draw 0.
    WHERE d.need > 0
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

COMMENT ON FUNCTION lots_draw(p_accounts text[], p_entries bigint[], p_seqs bigint[], p_needs bigint[], p_first_lot bigint, p_repay boolean, p_kinds text[], p_postings bigint[], p_ats timestamptz[]) IS 'Draws the demands (account, entry, seq, amount needed, the debit''s kind, the posting entry and its time; arrays in lockstep) from their accounts'' open lots in draw order (p_first_lot first, when given), set-based: lot_draws, the revenue_recognitions of priced lots, lots'' remaining, and lot_debts for what no lot covered. p_repay: the demands are debts already owed (their lot_debts rows are updated or deleted). Called by ledger_lots under the accounts'' row locks.';

-- PL/pgSQL: on Citus, a join in an SQL function taking parameters cannot be planned.
CREATE FUNCTION lots_repay(p_account text, p_posting bigint, p_at timestamptz) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM lots_draw(array_agg(d.account_id), array_agg(d.entry_id), array_agg(d.seq), array_agg(d.uncovered), NULL,
                      true, array_agg(e.kind), array_agg(p_posting), array_agg(p_at))
    FROM lot_debts d
    JOIN ledger e ON e.account_id = d.account_id AND e.id = d.entry_id
    WHERE d.account_id = p_account AND e.account_id = p_account
    HAVING count(*) > 0;
END;
$$;

COMMENT ON FUNCTION lots_repay(p_account text, p_posting bigint, p_at timestamptz) IS 'Repays an account''s debt from its open lots: each uncovered debit, oldest first, draws in draw order; what priced lots recognise is booked in the posting of p_posting (the credit or restore), at p_at.';

-- The status derived from the rows that hold it, on the database clock. The tables are named by the caller:
-- the logical ones (the overload below), or on Citus, inside a trigger on a shard, the account's colocated
-- shards.
CREATE FUNCTION recharge_status_compute(account text, accounts_rel text, attempts_rel text, windows_rel text, blocks_rel text) RETURNS TABLE(status text, next_eligible_at timestamptz, window_start timestamptz, window_attempts integer, window_recharged_amount bigint)
    LANGUAGE plpgsql STABLE
    AS $_$
BEGIN
    RETURN QUERY EXECUTE format($q$
        SELECT s.status,
               (CASE s.status
                    WHEN 'cooling_down' THEN greatest(s.next_eligible_at, s.retry_at)
                    WHEN 'budget_exhausted' THEN s.window_start + ('1 ' || s.recharge_budget_period)::interval
                END),
               s.window_start,
               s.window_attempts::integer,
               s.window_recharged_amount::bigint
        FROM (
            SELECT CASE
                       WHEN a.recharge_stopped IS NOT NULL THEN a.recharge_stopped
                       WHEN NOT a.recharge_enabled THEN 'off'
                       WHEN last.status = 'requested' THEN 'pending_attempt'
                       WHEN last.status = 'action_required' AND last.episode = a.recharge_episode THEN 'requires_action'
                       WHEN greatest(a.recharge_next_eligible_at, last.retry_at) > now() THEN 'cooling_down'
                       WHEN w.attempts >= a.recharge_budget_count
                            OR EXISTS (SELECT 1 FROM %4$s b
                                       WHERE b.account_id = a.id AND b.episode = a.recharge_episode
                                         AND b.reason = 'budget_exhausted' AND b.next_eligible_at > now()) THEN 'budget_exhausted'
                       ELSE 'ready'
                   END AS status,
                   a.recharge_next_eligible_at AS next_eligible_at,
                   last.retry_at,
                   a.recharge_budget_period,
                   date_trunc(a.recharge_budget_period, now(), 'UTC') AS window_start,
                   coalesce(w.attempts, 0) AS window_attempts,
                   coalesce(w.recharged_amount, 0) AS window_recharged_amount
            FROM %1$s a
            LEFT JOIN LATERAL (
                SELECT r.status, r.episode, r.retry_at FROM %2$s r WHERE r.account_id = a.id ORDER BY r.id DESC LIMIT 1
            ) last ON true
            LEFT JOIN %3$s w
                ON w.account_id = a.id
               AND w.period = a.recharge_budget_period
               AND w.window_start = date_trunc(a.recharge_budget_period, now(), 'UTC')
            WHERE a.id = $1
        ) s $q$, accounts_rel, attempts_rel, windows_rel, blocks_rel) USING account;
END;
$_$;

COMMENT ON FUNCTION recharge_status_compute(account text, accounts_rel text, attempts_rel text, windows_rel text, blocks_rel text) IS 'An account''s recharge status now (SPEC §17), from why it stopped, its newest attempt, its cooldown or pending retry and its budget window; next_eligible_at is when cooling_down or budget_exhausted ends. No row when the account does not exist. The one place the status is derived.';

CREATE FUNCTION recharge_status_compute(account text) RETURNS TABLE(status text, next_eligible_at timestamptz, window_start timestamptz, window_attempts integer, window_recharged_amount bigint)
    LANGUAGE sql STABLE
    AS $$
SELECT * FROM recharge_status_compute(account, 'accounts', 'recharge_attempts', 'recharge_windows', 'recharge_blocks')
$$;

COMMENT ON FUNCTION recharge_status_compute(account text) IS 'recharge_status_compute on the logical tables.';

-- The UPDATE of the stored status is conditional on the transition number read first (recharge_status_seq),
-- so of two transactions moving the same status (two sweeps) the second, which waited for the first's row
-- lock, updates nothing and records nothing; every other caller holds the account's row lock already. So
-- recharge_status_changes_pkey (account_id, seq) records each change once, and recharge.status_changed is
-- told once. Returns whether it recorded a change.
CREATE FUNCTION recharge_status_sync(account text, reason text, accounts_rel text, attempts_rel text, windows_rel text, blocks_rel text, changes_rel text) RETURNS boolean
    LANGUAGE plpgsql
    AS $_$
DECLARE
    old_status text;
    old_next   timestamptz;
    old_seq    bigint;
    now_status text;
    now_next   timestamptz;
    n          bigint;
BEGIN
    EXECUTE format('SELECT recharge_status, recharge_status_next_eligible_at, recharge_status_seq FROM %s WHERE id = $1',
                   accounts_rel)
        INTO old_status, old_next, old_seq USING account;
    SELECT c.status, c.next_eligible_at INTO now_status, now_next
    FROM recharge_status_compute(account, accounts_rel, attempts_rel, windows_rel, blocks_rel) c;
    IF now_status IS NULL OR (now_status = old_status AND now_next IS NOT DISTINCT FROM old_next) THEN
        RETURN false;
    END IF;
    EXECUTE format('UPDATE %s SET recharge_status = $2, recharge_status_next_eligible_at = $3, '
                   '    recharge_status_seq = recharge_status_seq + CASE WHEN recharge_status = $2 THEN 0 ELSE 1 END '
                   'WHERE id = $1 AND recharge_status_seq = $4', accounts_rel)
        USING account, now_status, now_next, old_seq;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n = 0 OR now_status = old_status THEN
        -- Moved meanwhile by another transaction, or only the time of the same status changed.
        RETURN false;
    END IF;
    EXECUTE format('INSERT INTO %s (account_id, seq, from_status, to_status, reason, next_eligible_at) '
                   'VALUES ($1, $2, $3, $4, $5, $6)', changes_rel)
        USING account, old_seq + 1, old_status, now_status, reason, now_next;
    RETURN true;
END;
$_$;

COMMENT ON FUNCTION recharge_status_sync(account text, reason text, accounts_rel text, attempts_rel text, windows_rel text, blocks_rel text, changes_rel text) IS 'Moves accounts.recharge_status to what recharge_status_compute gives now and records the change once (recharge_status_changes, numbered by recharge_status_seq), for the reason given. Called in the transaction of every change: accounts_available_watch, the PUT, an attempt''s resolution, the sweep.';

CREATE FUNCTION recharge_status_sync(account text, reason text) RETURNS boolean
    LANGUAGE sql
    AS $$
SELECT recharge_status_sync(account, reason, 'accounts', 'recharge_attempts', 'recharge_windows', 'recharge_blocks',
                            'recharge_status_changes')
$$;

COMMENT ON FUNCTION recharge_status_sync(account text, reason text) IS 'recharge_status_sync on the logical tables.';

CREATE FUNCTION revenue_periods_refuse_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    -- The table is named by the trigger's argument: on Citus the trigger runs on a copy (a shard) whose
    -- name has a suffix, and Citus relays only the detail, which the application reads (db.MapError).
    RAISE EXCEPTION 'a closed period never changes: % of % refused', TG_OP, TG_ARGV[0]
        USING ERRCODE = 'restrict_violation',
              CONSTRAINT = 'revenue_periods_frozen',
              TABLE = TG_ARGV[0],
              DETAIL = format('constraint revenue_periods_frozen on table %s', TG_ARGV[0]),
              HINT = 'Corrections land in the open period.';
END;
$$;

COMMENT ON FUNCTION revenue_periods_refuse_change() IS 'Raises restrict_violation naming constraint revenue_periods_frozen for any UPDATE, DELETE or TRUNCATE of a closed period''s report or totals.';

CREATE FUNCTION revenue_recognitions_refuse_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION 'revenue recognitions are append-only: % refused', TG_OP
        USING ERRCODE = 'restrict_violation',
              CONSTRAINT = 'revenue_recognitions_append_only',
              TABLE = 'revenue_recognitions',
              -- Citus relays a shard's error without its constraint and table fields, but with its detail.
              DETAIL = 'constraint revenue_recognitions_append_only on table revenue_recognitions';
END;
$$;

COMMENT ON FUNCTION revenue_recognitions_refuse_change() IS 'Raises restrict_violation naming constraint revenue_recognitions_append_only for any UPDATE, DELETE or TRUNCATE of revenue_recognitions.';

-- Locks the events parked waiting for a payment, to re-apply them in the transaction that records it. One
-- function, because Citus locks rows only in single-shard statements (sql/citus gives it a form that locks
-- them one event at a time).
CREATE FUNCTION stripe_events_lock_parked(p_payment_intent text) RETURNS TABLE(event_id text, payload jsonb)
    LANGUAGE sql
    AS $$
SELECT e.event_id, e.payload
FROM stripe_events e
WHERE e.outcome = 'parked'
  AND e.parked_reason = 'unknown_payment'
  AND e.payment_intent = p_payment_intent
ORDER BY e.seq
FOR UPDATE SKIP LOCKED;
$$;

COMMENT ON FUNCTION stripe_events_lock_parked(p_payment_intent text) IS 'The events parked as unknown_payment for a payment, in arrival order, locked until the transaction ends (SKIP LOCKED: one being replayed right now is passed over, so two transactions never re-apply one event).';

-- An order that names no credits buys its amount: such is the recharge attempt's order, which
-- accounts_available_watch inserts in the account's currency, and 1:1 is a price there because an account
-- counted in credits has no recharge (accounts_recharge_unit_check).
CREATE FUNCTION topups_credits_default() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.credits := coalesce(NEW.credits, NEW.amount);
    RETURN NEW;
END;
$$;

COMMENT ON FUNCTION topups_credits_default() IS 'Before an order is inserted: credits not named are the amount (1:1).';

-- ==== Triggers on ledger ====================================================================================

CREATE TRIGGER ledger_append_only BEFORE DELETE OR UPDATE ON ledger FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();

COMMENT ON TRIGGER ledger_append_only ON ledger IS 'Entries are never changed or deleted: corrections are new entries.';

-- The chain is held by a statement-level trigger rather than by each posting statement. What it costs was
-- measured on a shared 2-core machine (load average 14-18 from other suites, so single runs are noisy),
-- against the schema without the chain: billing 1,000,000 decisions through the reconciler
-- (BenchmarkBilling, ./internal/reconcile) over 1,000 accounts ran at 17,464 decisions/s
-- against 24,528 (0.71x, within the 0.7x bound); over one account the machine's load, not the schema, moved
-- the result (8,121 against 26,491 in one run, 33,165 against 21,687 run alone right after). Group commit
-- (db/poster_bench_test.go, 64 callers on one account) stays far above 10x one transaction per posting:
-- 0.32-0.45 ms against 37.8 ms per posting (0.28-0.39 against 14.2 without the chain). In EXPLAIN ANALYZE of
-- one 10,000-decision chunk the trigger takes 50-80 ms of 700-1,200 ms; what billing pays for history is
-- mostly the chain itself (one more ledger_dedupe_idx probe per decision, the running-sum window, two more
-- indexes), which the queries would pay without the trigger as well, while moving the balance in each
-- query instead would save only the trigger's call.
CREATE TRIGGER ledger_chain AFTER INSERT ON ledger REFERENCING NEW TABLE AS new_entries FOR EACH STATEMENT EXECUTE FUNCTION ledger_chain_advance();

COMMENT ON TRIGGER ledger_chain ON ledger IS 'The chain rule and the cached balance are held by the database: every INSERT statement''s entries must continue their account''s seq and balance_after from accounts.last_seq and accounts.balance, which this trigger then moves. No posting path can forget the balance or break the chain.';

-- The database holds the lots as it holds the chain: ledger_lots runs after ledger_chain on every INSERT
-- into the ledger (triggers fire in name order), on the rows of the accounts the statement posted to, which
-- every posting path has locked before inserting. No posting path (single, group commit, billing, hold
-- capture, webhook reversals, expiry, recharge) carries lot code of its own, and every statement the trigger
-- runs touches rows of those accounts only.
CREATE TRIGGER ledger_lots AFTER INSERT ON ledger REFERENCING NEW TABLE AS new_entries FOR EACH STATEMENT EXECUTE FUNCTION ledger_lots_apply();

COMMENT ON TRIGGER ledger_lots ON ledger IS 'Every entry moves the lots of its account in the statement that inserts it, in seq order under the account lock: no posting path can forget a lot, and the order is the ledger''s.';

CREATE TRIGGER ledger_no_truncate BEFORE TRUNCATE ON ledger FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

COMMENT ON TRIGGER ledger_no_truncate ON ledger IS 'The ledger cannot be emptied wholesale either.';

-- ==== Triggers on accounts ==================================================================================

-- Deferred to commit and judged on the account as the transaction leaves it: a hold's capture releases held
-- and posts its usage in two statements (in either order), and an immediate trigger would see the state
-- between them (a dip below, or a rise above, that never really happened) and start a spurious attempt or
-- episode. The WHEN clause queues nothing for accounts that watch nothing, or for an update that moves
-- neither balance nor held (settings, episode counters), except a raise of recharge_retry by the failure
-- ladder's job: the retry is made by the same rule, budget and cooldown as a first attempt. Nothing lowers
-- recharge_retry but a new episode, which queues nothing.
CREATE CONSTRAINT TRIGGER accounts_available_watch
    AFTER UPDATE ON accounts
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN ((NEW.recharge_enabled OR NEW.low_balance_alert IS NOT NULL)
          AND ((NEW.balance, NEW.held) IS DISTINCT FROM (OLD.balance, OLD.held) OR NEW.recharge_retry > OLD.recharge_retry))
    EXECUTE FUNCTION accounts_available_watch();

COMMENT ON TRIGGER accounts_available_watch ON accounts IS 'Every debit moves accounts.balance or accounts.held with an UPDATE (ledger_chain_advance, holds), and the failure ladder raises accounts.recharge_retry, so auto-recharge and alerts happen in that transaction on every path without any path calling for them.';

COMMENT ON CONSTRAINT accounts_available_watch ON accounts IS 'The constraint entry of the deferred trigger accounts_available_watch (a constraint trigger is what PostgreSQL can defer to commit).';

CREATE TRIGGER accounts_parent_tree BEFORE INSERT OR DELETE OR UPDATE OF parent_id, depth, currency ON accounts FOR EACH ROW EXECUTE FUNCTION accounts_parent_tree();

COMMENT ON TRIGGER accounts_parent_tree ON accounts IS 'Holds the tree of pools: the parent exists and has the same currency and unit, no cycle, the parent never changes, depth = the parent''s + 1 (accounts_depth_check bounds it).';

-- ==== Triggers on audit_log =================================================================================

CREATE TRIGGER audit_log_append_only BEFORE DELETE OR UPDATE ON audit_log FOR EACH ROW EXECUTE FUNCTION audit_log_refuse_change();

COMMENT ON TRIGGER audit_log_append_only ON audit_log IS 'What happened stays as it was recorded.';

CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log FOR EACH STATEMENT EXECUTE FUNCTION audit_log_refuse_change();

COMMENT ON TRIGGER audit_log_no_truncate ON audit_log IS 'The audit trail cannot be emptied wholesale either.';

-- ==== Triggers on hold_reservations =========================================================================

CREATE TRIGGER hold_reservations_append_only BEFORE DELETE OR UPDATE ON hold_reservations FOR EACH ROW EXECUTE FUNCTION hold_reservations_append_only();

COMMENT ON TRIGGER hold_reservations_append_only ON hold_reservations IS 'What a pool reserved for a hold is a fact of its authorisation: the hold''s status says whether it is released.';

-- ==== Triggers on revenue_period_balances ===================================================================

CREATE TRIGGER revenue_period_balances_frozen BEFORE DELETE OR UPDATE ON revenue_period_balances FOR EACH ROW EXECUTE FUNCTION revenue_periods_refuse_change('revenue_period_balances');

COMMENT ON TRIGGER revenue_period_balances_frozen ON revenue_period_balances IS 'The totals a closed period stored never change: the next period opens from them.';

CREATE TRIGGER revenue_period_balances_frozen_truncate BEFORE TRUNCATE ON revenue_period_balances FOR EACH STATEMENT EXECUTE FUNCTION revenue_periods_refuse_change('revenue_period_balances');

COMMENT ON TRIGGER revenue_period_balances_frozen_truncate ON revenue_period_balances IS 'The stored totals cannot be emptied wholesale either.';

-- ==== Triggers on revenue_periods ===========================================================================

CREATE TRIGGER revenue_periods_frozen BEFORE DELETE OR UPDATE ON revenue_periods FOR EACH ROW EXECUTE FUNCTION revenue_periods_refuse_change('revenue_periods');

COMMENT ON TRIGGER revenue_periods_frozen ON revenue_periods IS 'A closed period''s report and digest never change.';

CREATE TRIGGER revenue_periods_frozen_truncate BEFORE TRUNCATE ON revenue_periods FOR EACH STATEMENT EXECUTE FUNCTION revenue_periods_refuse_change('revenue_periods');

COMMENT ON TRIGGER revenue_periods_frozen_truncate ON revenue_periods IS 'Closed periods cannot be emptied wholesale either.';

-- ==== Triggers on revenue_recognitions ======================================================================

CREATE TRIGGER revenue_recognitions_append_only BEFORE DELETE OR UPDATE ON revenue_recognitions FOR EACH ROW EXECUTE FUNCTION revenue_recognitions_refuse_change();

COMMENT ON TRIGGER revenue_recognitions_append_only ON revenue_recognitions IS 'What was recognised stays as it was booked: a correction is a new movement (a restore, an adjustment).';

CREATE TRIGGER revenue_recognitions_no_truncate BEFORE TRUNCATE ON revenue_recognitions FOR EACH STATEMENT EXECUTE FUNCTION revenue_recognitions_refuse_change();

COMMENT ON TRIGGER revenue_recognitions_no_truncate ON revenue_recognitions IS 'The recognitions cannot be emptied wholesale either.';

-- ==== Triggers on topups ====================================================================================

CREATE TRIGGER topups_credits_default BEFORE INSERT ON topups FOR EACH ROW EXECUTE FUNCTION topups_credits_default();

COMMENT ON TRIGGER topups_credits_default ON topups IS 'An order that names no credits (a recharge attempt''s) buys its amount, 1:1.';

-- ==== Foreign keys ========================================================================================

ALTER TABLE ONLY ledger
    ADD CONSTRAINT ledger_account_fk FOREIGN KEY (account_id) REFERENCES accounts(id);

COMMENT ON CONSTRAINT ledger_account_fk ON ledger IS 'Every entry belongs to an existing account.';

ALTER TABLE ONLY balance_alerts
    ADD CONSTRAINT balance_alerts_account_fk FOREIGN KEY (account_id) REFERENCES accounts(id);

COMMENT ON CONSTRAINT balance_alerts_account_fk ON balance_alerts IS 'Every alert belongs to an existing account.';

ALTER TABLE ONLY credit_lots
    ADD CONSTRAINT credit_lots_account_fk FOREIGN KEY (account_id) REFERENCES accounts(id);

COMMENT ON CONSTRAINT credit_lots_account_fk ON credit_lots IS 'Every lot belongs to an existing account.';

ALTER TABLE ONLY hold_reservations
    ADD CONSTRAINT hold_reservations_hold_fk FOREIGN KEY (account_id, hold_id) REFERENCES holds(account_id, id);

COMMENT ON CONSTRAINT hold_reservations_hold_fk ON hold_reservations IS 'A reservation belongs to a hold of the same account.';

ALTER TABLE ONLY holds
    ADD CONSTRAINT holds_account_fk FOREIGN KEY (account_id) REFERENCES accounts(id);

COMMENT ON CONSTRAINT holds_account_fk ON holds IS 'Every hold belongs to an existing account.';

ALTER TABLE ONLY lot_debts
    ADD CONSTRAINT lot_debts_account_fk FOREIGN KEY (account_id) REFERENCES accounts(id);

COMMENT ON CONSTRAINT lot_debts_account_fk ON lot_debts IS 'A debt belongs to an existing account.';

ALTER TABLE ONLY lot_draws
    ADD CONSTRAINT lot_draws_lot_fk FOREIGN KEY (account_id, lot_id) REFERENCES credit_lots(account_id, id);

COMMENT ON CONSTRAINT lot_draws_lot_fk ON lot_draws IS 'A draw takes from an existing lot of the same account.';

ALTER TABLE ONLY lot_refills
    ADD CONSTRAINT lot_refills_lot_fk FOREIGN KEY (account_id, lot_id) REFERENCES credit_lots(account_id, id);

COMMENT ON CONSTRAINT lot_refills_lot_fk ON lot_refills IS 'A refill goes to an existing lot of the same account.';

ALTER TABLE ONLY recharge_attempts
    ADD CONSTRAINT recharge_attempts_account_fk FOREIGN KEY (account_id) REFERENCES accounts(id);

COMMENT ON CONSTRAINT recharge_attempts_account_fk ON recharge_attempts IS 'Every attempt belongs to an existing account.';

ALTER TABLE ONLY recharge_attempts
    ADD CONSTRAINT recharge_attempts_topup_fk FOREIGN KEY (account_id, topup_id) REFERENCES topups(account_id, id);

COMMENT ON CONSTRAINT recharge_attempts_topup_fk ON recharge_attempts IS 'The order the attempt owns exists, under the same account (checked at the end of the trigger''s statement, which inserts both).';

ALTER TABLE ONLY recharge_blocks
    ADD CONSTRAINT recharge_blocks_account_fk FOREIGN KEY (account_id) REFERENCES accounts(id);

COMMENT ON CONSTRAINT recharge_blocks_account_fk ON recharge_blocks IS 'Every block belongs to an existing account.';

ALTER TABLE ONLY recharge_status_changes
    ADD CONSTRAINT recharge_status_changes_account_fk FOREIGN KEY (account_id) REFERENCES accounts(id);

COMMENT ON CONSTRAINT recharge_status_changes_account_fk ON recharge_status_changes IS 'Every change belongs to an existing account.';

ALTER TABLE ONLY recharge_windows
    ADD CONSTRAINT recharge_windows_account_fk FOREIGN KEY (account_id) REFERENCES accounts(id);

COMMENT ON CONSTRAINT recharge_windows_account_fk ON recharge_windows IS 'Every window belongs to an existing account.';

ALTER TABLE ONLY revenue_period_balances
    ADD CONSTRAINT revenue_period_balances_period_fk FOREIGN KEY (period) REFERENCES revenue_periods(period);

COMMENT ON CONSTRAINT revenue_period_balances_period_fk ON revenue_period_balances IS 'Totals are stored with their closed month, in its transaction.';

ALTER TABLE ONLY revenue_recognitions
    ADD CONSTRAINT revenue_recognitions_lot_fk FOREIGN KEY (account_id, lot_id) REFERENCES credit_lots(account_id, id);

COMMENT ON CONSTRAINT revenue_recognitions_lot_fk ON revenue_recognitions IS 'A recognition is of an existing lot of the same account.';

ALTER TABLE ONLY spend_limits
    ADD CONSTRAINT spend_limits_account_fk FOREIGN KEY (account_id) REFERENCES accounts(id);

COMMENT ON CONSTRAINT spend_limits_account_fk ON spend_limits IS 'Every limit belongs to an existing account.';

ALTER TABLE ONLY spend_windows
    ADD CONSTRAINT spend_windows_limit_fk FOREIGN KEY (account_id, limit_id) REFERENCES spend_limits(account_id, id) ON DELETE CASCADE;

COMMENT ON CONSTRAINT spend_windows_limit_fk ON spend_windows IS 'A window belongs to its limit and goes with it when the limit is deleted.';

ALTER TABLE ONLY topups
    ADD CONSTRAINT topups_account_fk FOREIGN KEY (account_id) REFERENCES accounts(id);

COMMENT ON CONSTRAINT topups_account_fk ON topups IS 'Every order buys credits for an existing account.';
