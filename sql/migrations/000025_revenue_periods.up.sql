-- Period close (SPEC §19): a month's liability report, frozen. Closing a month stores the report's CSV with
-- its SHA-256 (revenue_periods) and the cumulative totals of every measure at the month's end, per currency
-- (revenue_period_balances). The stored report is what the month answers from then on; the stored totals are
-- where the next period opens, so that a correction dated in a closed month (a transaction that began before
-- the month ended and committed after its close) lands in the open period instead of changing a closed one.
--
-- A period belongs to the deployment, not to an account: its key is the month (and the currency), with no
-- account_id. On Citus both tables are REFERENCE tables (db/citus.go, referenceTables), not distributed ones:
-- they hold a dozen rows a month, written once a month and read by every report, so a copy on every node
-- costs nothing, lets the report join them with the account tables on any node, and keeps the foreign key
-- between them. §15's rule (every unique key holds the distribution column) is about distributed tables: a
-- reference table has no distribution column, and its keys are checked on one copy, like plain PostgreSQL.
-- Rows are never changed or deleted (revenue_periods_frozen): a closed period's report never changes.
CREATE TABLE revenue_periods (
    period     date        NOT NULL,
    closed_at  timestamptz NOT NULL DEFAULT now(),
    report_csv text        NOT NULL,
    digest     text        NOT NULL,
    CONSTRAINT revenue_periods_pkey PRIMARY KEY (period),
    CONSTRAINT revenue_periods_month_check CHECK (period = date_trunc('month', period)::date),
    CONSTRAINT revenue_periods_digest_check CHECK (digest = encode(sha256(convert_to(report_csv, 'UTF8')), 'hex'))
);

COMMENT ON TABLE revenue_periods IS
    'A closed month: its liability report as stored when it was closed, and the SHA-256 of that CSV. '
    'Append-only; a Citus reference table (deployment-wide, no account).';
COMMENT ON COLUMN revenue_periods.period IS 'The month''s first day (UTC): the period runs to the next month''s first day.';
COMMENT ON COLUMN revenue_periods.report_csv IS
    'The liability report of the month (GET /v1/reports/liability, CSV), as the month answers it from now on.';
COMMENT ON COLUMN revenue_periods.digest IS 'SHA-256 of report_csv (lower-case hex): the Report-Digest header.';
COMMENT ON CONSTRAINT revenue_periods_pkey ON revenue_periods IS
    'A month is closed once; closing it again answers the stored report.';
COMMENT ON CONSTRAINT revenue_periods_month_check ON revenue_periods IS 'A period is a whole calendar month.';
COMMENT ON CONSTRAINT revenue_periods_digest_check ON revenue_periods IS
    'The digest is the SHA-256 of the stored report, computed by the database: it cannot name another text.';

CREATE TABLE revenue_period_balances (
    period              date   NOT NULL,
    currency            text   NOT NULL,
    measure             text   NOT NULL,
    amount              bigint NOT NULL,
    paid_credits        bigint NOT NULL,
    promotional_credits bigint NOT NULL,
    CONSTRAINT revenue_period_balances_pkey PRIMARY KEY (period, currency, measure),
    CONSTRAINT revenue_period_balances_period_fk FOREIGN KEY (period) REFERENCES revenue_periods (period),
    CONSTRAINT revenue_period_balances_measure_check
        CHECK (measure IN ('purchased', 'recognised', 'breakage', 'refunded', 'disputed', 'restored'))
);

COMMENT ON TABLE revenue_period_balances IS
    'For each closed month, currency and measure: the total of that measure from the beginning up to the '
    'month''s end, as counted when the month closed. The next period opens from these totals. Append-only; a '
    'Citus reference table.';
COMMENT ON COLUMN revenue_period_balances.amount IS 'In the currency''s minor units.';
COMMENT ON COLUMN revenue_period_balances.paid_credits IS 'The credits of paid lots the measure counts.';
COMMENT ON COLUMN revenue_period_balances.promotional_credits IS 'The credits of promotional lots the measure counts.';
COMMENT ON CONSTRAINT revenue_period_balances_pkey ON revenue_period_balances IS
    'One total per closed month, currency and measure.';
COMMENT ON CONSTRAINT revenue_period_balances_period_fk ON revenue_period_balances IS
    'Totals are stored with their closed month, in its transaction.';
COMMENT ON CONSTRAINT revenue_period_balances_measure_check ON revenue_period_balances IS
    'The measures of the liability report that move deferred revenue.';

CREATE FUNCTION revenue_periods_refuse_change() RETURNS trigger
    LANGUAGE plpgsql AS
$$
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

COMMENT ON FUNCTION revenue_periods_refuse_change() IS
    'Raises restrict_violation naming constraint revenue_periods_frozen for any UPDATE, DELETE or TRUNCATE '
    'of a closed period''s report or totals.';

CREATE TRIGGER revenue_periods_frozen
    BEFORE UPDATE OR DELETE ON revenue_periods
    FOR EACH ROW EXECUTE FUNCTION revenue_periods_refuse_change('revenue_periods');
CREATE TRIGGER revenue_periods_frozen_truncate
    BEFORE TRUNCATE ON revenue_periods
    FOR EACH STATEMENT EXECUTE FUNCTION revenue_periods_refuse_change('revenue_periods');
CREATE TRIGGER revenue_period_balances_frozen
    BEFORE UPDATE OR DELETE ON revenue_period_balances
    FOR EACH ROW EXECUTE FUNCTION revenue_periods_refuse_change('revenue_period_balances');
CREATE TRIGGER revenue_period_balances_frozen_truncate
    BEFORE TRUNCATE ON revenue_period_balances
    FOR EACH STATEMENT EXECUTE FUNCTION revenue_periods_refuse_change('revenue_period_balances');

COMMENT ON TRIGGER revenue_periods_frozen ON revenue_periods IS
    'A closed period''s report and digest never change.';
COMMENT ON TRIGGER revenue_periods_frozen_truncate ON revenue_periods IS
    'Closed periods cannot be emptied wholesale either.';
COMMENT ON TRIGGER revenue_period_balances_frozen ON revenue_period_balances IS
    'The totals a closed period stored never change: the next period opens from them.';
COMMENT ON TRIGGER revenue_period_balances_frozen_truncate ON revenue_period_balances IS
    'The stored totals cannot be emptied wholesale either.';
