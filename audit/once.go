package audit

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
)

// A payment is counted once, and a bonus once per outage and account (docs/architecture.md):
// the purchases and bonus_grants rows are what make it so, so the audit compares them with the
// facts. PostgreSQL does the grouping, in the audit's snapshot, over the CreditsPurchased and
// BonusGranted facts it finds through the index of the events that are not charges
// (events_sparse), and over those archived, which each account's boundary state lists
// (archive.AccountState's payments and bonuses; docs/operations.md, "Retention and
// archiving"): the audit holds only the differences, whatever the number of payments.

// onceSQL finds, in one statement, each of:
//   - a payment_ref credited by more than one CreditsPurchased fact, in the store or archived
//     (across all accounts);
//   - a CreditsPurchased fact (in the store or archived) without its purchases row, a row
//     without its fact (unless its account's archived history does not list its payments:
//     then the next check), and a row that differs from its fact (account, credits, cents,
//     balance after);
//   - a purchases row whose recorded_at is not its CreditsPurchased fact's (in the store): what
//     the console reads back of a payment's time is the ledger's;
//   - for an account whose archived history does not list its payments (archived before they
//     were listed), its purchases rows without a fact in the store that do not match, in
//     number, credits and cents, the purchases its archived daily sums count, or were recorded
//     after its archived history ends;
//   - for an account whose archived history lists its payments or bonuses, a list that does
//     not add up to the archived totals and daily sums of its kind;
//   - an outage credited to one account by more than one BonusGranted fact (in the store or
//     archived), a BonusGranted fact of an outage bonus_grants does not hold, or of other
//     credits (or, in the store, another reason) than its grant's;
//   - an account that had an active or grace key at a finished grant's granted_at, which no
//     BonusGranted fact of that outage credits (in the store or archived);
//   - (whole-store audits) a grant whose accounts count is not the number of its facts, in
//     the store and archived (or only less, when some account's archived history does not list
//     its bonuses: its archived facts are not counted).
//
// Each row is a kind and its fields as text. The account audit's statement ($2, $3: its stream
// number and account) reads its own stream's facts, boundary and rows.
func onceSQL(account bool) string {
	inStream, ofAccount, ofKey, inArchive := "", "", "", ""
	if account {
		inStream, ofAccount, ofKey, inArchive = `AND e.stream_no = $2`, `p.account_id = $3 AND`, `k.account_id = $3 AND`, `AND b.stream_no = $2`
	}
	// The facts name their streams by number: a stream's id is looked up (streamName) only for
	// the rows that report a difference, not joined to every fact. The archived facts (kept)
	// come from the boundaries, one row of streams per archived account. Facts are ordered by
	// position, the archived ones (which have none) first, by version.
	sql := `WITH facts AS MATERIALIZED (
	SELECT e.stream_no, e.version, e.position, e.type,
		e.payload->>'payment_ref' AS ref, e.payload->>'outage_id' AS outage, e.payload->>'credits_delta' AS credits,
		e.payload->>'amount_cents' AS cents, e.payload->>'balance_after' AS balance_after,
		coalesce(e.payload->>'reason', '') AS reason, false AS archived, e.recorded_at AS at
	FROM events e
	WHERE e.type IN ('CreditsPurchased', 'BonusGranted') AND e.type <> 'RequestCharged' AND e.type <> 'RequestDeduplicated' ` + inStream + `
), bounds AS MATERIALIZED (
	SELECT b.stream_no, substr(s.stream_id, length($1) + 1) AS account_id, b.version, b.recorded_at, b.account,
		coalesce(jsonb_typeof(b.account->'payments') = 'array', false) AS pays_listed,
		coalesce(jsonb_typeof(b.account->'bonuses') = 'array', false) AS bonuses_listed
	FROM stream_boundaries b JOIN streams s ON s.stream_no = b.stream_no
	WHERE starts_with(s.stream_id, $1) ` + inArchive + `
), kept AS (
	SELECT x.stream_no, (p->>'version')::bigint AS version, NULL::bigint AS position, 'CreditsPurchased' AS type,
		p->>'payment_ref' AS ref, NULL::text AS outage, p->>'credits' AS credits, p->>'cents' AS cents,
		p->>'balance_after' AS balance_after, NULL::text AS reason, true AS archived, NULL::timestamptz AS at
	FROM bounds x, jsonb_array_elements(CASE WHEN x.pays_listed THEN x.account->'payments' ELSE '[]' END) p
	UNION ALL
	SELECT x.stream_no, (p->>'version')::bigint, NULL, 'BonusGranted', NULL, p->>'outage_id', p->>'credits', NULL, NULL, NULL, true, NULL
	FROM bounds x, jsonb_array_elements(CASE WHEN x.bonuses_listed THEN x.account->'bonuses' ELSE '[]' END) p
), purchased AS (
	SELECT ref, count(*) AS n, min(stream_no) AS stream_no, min(version) AS version, bool_or(archived) AS archived,
		(array_agg(stream_no ORDER BY position NULLS FIRST, version))[1:5] AS nos,
		(array_agg(version ORDER BY position NULLS FIRST, version))[1:5] AS versions,
		(array_agg(archived ORDER BY position NULLS FIRST, version))[1:5] AS kept,
		min(credits) AS credits, min(cents) AS cents, min(balance_after) AS balance_after, min(at) AS at
	FROM (SELECT * FROM facts WHERE type = 'CreditsPurchased' UNION ALL SELECT * FROM kept WHERE type = 'CreditsPurchased') f
	GROUP BY ref
), archived AS (
	SELECT x.stream_no, x.account_id, x.version, x.recorded_at, x.pays_listed, x.bonuses_listed,
		coalesce((x.account->>'purchased_credits')::numeric, 0) AS credits,
		coalesce((SELECT sum((d->>'count')::numeric) FROM jsonb_array_elements(days.a) d WHERE d->>'kind' = 'purchase'), 0) AS n,
		coalesce((SELECT sum((d->>'cents')::numeric) FROM jsonb_array_elements(days.a) d WHERE d->>'kind' = 'purchase'), 0) AS cents,
		coalesce((x.account->>'bonus_credits')::numeric, 0) AS bonus_credits,
		coalesce((SELECT sum((d->>'count')::numeric) FROM jsonb_array_elements(days.a) d WHERE d->>'kind' = 'bonus'), 0) AS bonus_n
	FROM bounds x,
		LATERAL (SELECT CASE WHEN jsonb_typeof(x.account->'days') = 'array' THEN x.account->'days' ELSE '[]' END AS a) days
), listed AS (
	SELECT stream_no, type, count(*) AS n, sum(credits::numeric) AS credits, coalesce(sum(cents::numeric), 0) AS cents
	FROM kept GROUP BY 1, 2
), unmatched AS (
	SELECT p.account_id, count(*) AS n, sum(p.credits_added) AS credits, sum(p.amount_cents) AS cents, max(p.recorded_at) AS newest
	FROM purchases p LEFT JOIN purchased f ON f.ref = p.payment_ref
	WHERE ` + ofAccount + ` f.n IS NULL GROUP BY 1
), granted AS (
	SELECT stream_no, outage, count(*) AS n,
		(array_agg('v' || version || CASE WHEN archived THEN ' (archived)' ELSE '' END ORDER BY position NULLS FIRST, version))[1:5] AS at,
		min(credits) AS lo, max(credits) AS hi,
		min(reason) AS reason_lo, max(reason) AS reason_hi -- of the facts in the store: the archived list no reasons
	FROM (SELECT * FROM facts WHERE type = 'BonusGranted' UNION ALL SELECT * FROM kept WHERE type = 'BonusGranted') f
	GROUP BY stream_no, outage
)
SELECT 'payment twice', ARRAY[ref, n::text, (
	SELECT string_agg(` + streamName("u.no") + ` || ' v' || u.v || CASE WHEN u.a THEN ' (archived)' ELSE '' END, ', ' ORDER BY u.i)
	FROM unnest(nos, versions, kept) WITH ORDINALITY u(no, v, a, i))]
FROM purchased WHERE n > 1
UNION ALL
SELECT CASE WHEN f.n IS NULL THEN 'row without payment' WHEN p.payment_ref IS NULL THEN 'payment without row' ELSE 'payment row differs' END,
	ARRAY[coalesce(f.ref, p.payment_ref), ` + streamName("f.stream_no") + ` || ' v' || f.version || CASE WHEN f.archived THEN ' (archived)' ELSE '' END,
		` + streamName("f.stream_no") + `, f.credits, f.cents, f.balance_after, p.account_id, p.credits_added::text, p.amount_cents::text, p.balance_after::text]
FROM purchased f FULL JOIN purchases p ON p.payment_ref = f.ref
WHERE CASE
	WHEN f.n IS NULL THEN ` + ofAccount + ` NOT EXISTS (SELECT FROM archived x WHERE x.account_id = p.account_id AND NOT x.pays_listed)
	WHEN f.n > 1 THEN false
	WHEN p.payment_ref IS NULL THEN true
	ELSE f.stream_no IS DISTINCT FROM (SELECT stream_no FROM streams WHERE stream_id = $1 || p.account_id)
		OR f.credits IS DISTINCT FROM p.credits_added::text
		OR f.cents IS DISTINCT FROM p.amount_cents::text OR f.balance_after IS DISTINCT FROM p.balance_after::text
	END
UNION ALL
SELECT 'payment row time differs', ARRAY[f.ref, ` + streamName("f.stream_no") + ` || ' v' || f.version, ` + streamName("f.stream_no") + `,
	to_char(f.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), to_char(p.recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')]
FROM purchased f JOIN purchases p ON p.payment_ref = f.ref
WHERE f.n = 1 AND NOT f.archived AND p.recorded_at <> f.at
	-- A row written before rows were dated as their facts carries its command's clock: earlier
	-- than its fact only when the fact took the time of the fact before it (a process whose
	-- clock ran ahead recorded that one).
	AND NOT (p.recorded_at < f.at AND f.at = (SELECT e.recorded_at FROM events e WHERE e.stream_no = f.stream_no AND e.version = f.version - 1))
UNION ALL
SELECT 'archived payments', ARRAY[x.account_id, x.version::text, x.n::text, x.credits::text, x.cents::text,
	coalesce(u.n, 0)::text, coalesce(u.credits, 0)::text, coalesce(u.cents, 0)::text, (u.newest > x.recorded_at)::text]
FROM archived x LEFT JOIN unmatched u USING (account_id)
WHERE NOT x.pays_listed
	AND (coalesce(u.n, 0) <> x.n OR coalesce(u.credits, 0) <> x.credits OR coalesce(u.cents, 0) <> x.cents OR u.newest > x.recorded_at)
UNION ALL
SELECT 'archived list', ARRAY[x.account_id, x.version::text, l.what, l.n::text, l.credits::text, l.cents::text,
	coalesce(k.n, 0)::text, coalesce(k.credits, 0)::text, coalesce(k.cents, 0)::text]
FROM archived x
	CROSS JOIN LATERAL (VALUES ('purchases', 'CreditsPurchased', x.pays_listed, x.n, x.credits, x.cents),
		('bonuses', 'BonusGranted', x.bonuses_listed, x.bonus_n, x.bonus_credits, 0::numeric)) l(what, type, listed, n, credits, cents)
	LEFT JOIN listed k ON k.stream_no = x.stream_no AND k.type = l.type
WHERE l.listed AND (coalesce(k.n, 0) <> l.n OR coalesce(k.credits, 0) <> l.credits OR coalesce(k.cents, 0) <> l.cents)
UNION ALL
SELECT CASE WHEN f.n > 1 THEN 'bonus twice' WHEN g.outage_id IS NULL THEN 'bonus without grant' ELSE 'bonus credits differ' END,
	ARRAY[` + streamName("f.stream_no") + `, f.outage, f.n::text, array_to_string(f.at, ', '), f.lo, f.hi, g.credits::text]
FROM granted f LEFT JOIN bonus_grants g ON g.outage_id = f.outage
WHERE f.n > 1 OR g.outage_id IS NULL OR f.lo IS DISTINCT FROM g.credits::text OR f.hi IS DISTINCT FROM g.credits::text
UNION ALL
SELECT 'bonus reason differs', ARRAY[` + streamName("f.stream_no") + `, f.outage, array_to_string(f.at, ', '), f.reason_lo, g.reason]
FROM granted f JOIN bonus_grants g ON g.outage_id = f.outage
WHERE f.n = 1 AND (f.reason_lo <> g.reason OR f.reason_hi <> g.reason)
UNION ALL
SELECT 'bonus ineligible', ARRAY[` + streamName("f.stream_no") + `, f.outage, array_to_string(f.at, ', '),
	to_char(g.granted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')]
FROM granted f JOIN bonus_grants g ON g.outage_id = f.outage JOIN streams s ON s.stream_no = f.stream_no
WHERE f.n = 1 AND NOT EXISTS (SELECT FROM api_keys k WHERE k.account_id = substr(s.stream_id, length($1) + 1)
	-- A grant of the first store (before migration 0006) read its clock before it read the
	-- keys, and credited a key issued in between: its issued_at may be after granted_at.
	AND (k.issued_at <= g.granted_at OR g.granted_at < (SELECT applied_at FROM schema_migrations WHERE name = '0006_write_model_v2.sql'))
	AND (k.revoked_at IS NULL OR k.revoked_at > g.granted_at)
	AND (k.grace_until IS NULL OR k.grace_until > g.granted_at))`
	// An account that had an active or grace key at a finished grant's granted_at was credited
	// by it: unless its archived history does not list its bonuses (then its archived facts are
	// not known), or the grant is of the first store (see above), whose eligibility this
	// cannot tell.
	sql += `
UNION ALL
SELECT 'bonus missing', ARRAY[` + streamName("m.stream_no") + `, m.outage_id,
	to_char(m.granted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')]
FROM (SELECT DISTINCT g.outage_id, g.granted_at, a.stream_no
	FROM bonus_grants g
		JOIN api_keys k ON k.issued_at <= g.granted_at AND (k.revoked_at IS NULL OR k.revoked_at > g.granted_at)
			AND (k.grace_until IS NULL OR k.grace_until > g.granted_at)
		JOIN accounts a ON a.account_id = k.account_id
	WHERE ` + ofKey + ` g.state = 'done'
		-- Not of the first store: a grant that has credited accounts since records the last
		-- (after_account, migration 0006), one of the first store never does.
		AND (g.after_account <> '' OR g.granted_at >= (SELECT applied_at FROM schema_migrations WHERE name = '0006_write_model_v2.sql'))) m
WHERE NOT EXISTS (SELECT FROM granted f WHERE f.stream_no = m.stream_no AND f.outage = m.outage_id)
	AND NOT EXISTS (SELECT FROM bounds x WHERE x.stream_no = m.stream_no AND NOT x.bonuses_listed)`
	if !account {
		// The archived BonusGranted facts are counted only where a boundary lists them: a grant
		// may count more accounts than its facts found while any boundary of an account (or of
		// a stream whose id is unknown) does not (docs/operations.md, "Retention and archiving").
		sql += `
UNION ALL
SELECT 'grant accounts', ARRAY[g.outage_id, g.accounts::text, coalesce(c.n, 0)::text]
FROM bonus_grants g LEFT JOIN (SELECT outage, sum(n) AS n FROM granted GROUP BY 1) c ON c.outage = g.outage_id
WHERE coalesce(c.n, 0) > g.accounts OR coalesce(c.n, 0) < g.accounts AND NOT EXISTS (
	SELECT FROM stream_boundaries b LEFT JOIN streams s ON s.stream_no = b.stream_no
	WHERE (b.account IS NOT NULL OR s.stream_id IS NULL OR starts_with(s.stream_id, $1))
		AND coalesce(jsonb_typeof(b.account->'bonuses'), '') <> 'array')`
	}
	return sql
}

// streamName is the SQL expression of the stream id of the stream numbered no ("#no" when the
// streams table has no row of it).
func streamName(no string) string {
	return `coalesce((SELECT stream_id FROM streams WHERE stream_no = ` + no + `), '#' || ` + no + `)`
}

// onceDiffs bounds the differences of each kind listed one by one; the rest are counted.
const onceDiffs = 100

// countedOnce reports what onceSQL finds: in the whole store, or (account) in one account.
//
// It runs beside the audit's workers, which keep both cores busy: PostgreSQL is kept from
// running it in parallel workers of its own (a whole-store scan of the events in three
// processes, on a benchmark store of 11M events, took 6 s of CPU from the workers for 2 s it
// saves), and from compiling it (JIT: a quarter of a second of CPU for a statement that runs
// once), for this query only.
func (a *auditor) countedOnce(ctx context.Context, tx pgx.Tx, account *streamInfo) error {
	args := []any{domain.AccountStream("")}
	if account != nil {
		args = append(args, account.head.No, account.account)
	}
	for _, set := range []string{`SET LOCAL max_parallel_workers_per_gather = 0`, `SET LOCAL jit = off`} {
		if _, err := tx.Exec(ctx, set); err != nil {
			return err
		}
	}
	rows, err := tx.Query(ctx, onceSQL(account != nil), args...)
	if err != nil {
		return err
	}
	defer func() {
		for _, reset := range []string{`RESET max_parallel_workers_per_gather`, `RESET jit`} {
			_, _ = tx.Exec(context.WithoutCancel(ctx), reset)
		}
	}()
	listed := map[string]int{}
	var kind string
	var fields []*string
	_, err = pgx.ForEachRow(rows, []any{&kind, &fields}, func() error {
		if listed[kind]++; listed[kind] > onceDiffs {
			return nil
		}
		f := make([]string, len(fields))
		for i, p := range fields {
			if f[i] = "none"; p != nil {
				f[i] = *p
			}
		}
		a.differ("%s", onceDiff(kind, f))
		return nil
	})
	for kind, n := range listed {
		if n > onceDiffs {
			a.differ("%s: %d more like it", onceDiff(kind, nil), n-onceDiffs)
		}
	}
	return err
}

// onceDiff words a row of onceSQL; with no fields, the kind alone.
func onceDiff(kind string, f []string) string {
	if f == nil {
		return "payments and bonuses: " + kind
	}
	owner := func(stream string) string {
		if id := domain.AccountOfStream(stream); id != "" {
			return "account " + id
		}
		return "stream " + stream
	}
	switch kind {
	case "payment twice":
		return fmt.Sprintf("payment %q: credited %s times (%s), but a payment is counted once", f[0], f[1], f[2])
	case "payment without row":
		return fmt.Sprintf("%s: payment %q (%s) has no purchases row, so the same payment_ref would be credited again", owner(f[2]), f[0], f[1])
	case "row without payment":
		return fmt.Sprintf("account %s: purchases row %q (%s credits, %s cents) has no CreditsPurchased fact", f[6], f[0], f[7], f[8])
	case "payment row differs":
		return fmt.Sprintf("%s: payment %q (%s) credits %s for %s cents, balance after %s; its purchases row says account %s, %s credits for %s cents, balance after %s",
			owner(f[2]), f[0], f[1], f[3], f[4], f[5], f[6], f[7], f[8], f[9])
	case "payment row time differs":
		return fmt.Sprintf("%s: payment %q (%s) was recorded at %s; its purchases row says %s", owner(f[2]), f[0], f[1], f[3], f[4])
	case "archived payments":
		s := fmt.Sprintf("account %s: its history archived up to v%s holds %s purchases (%s credits, %s cents), but %s purchases rows (%s credits, %s cents) have no CreditsPurchased fact in the store",
			f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7])
		if f[8] == "true" {
			s += ", some recorded after its archived history ends"
		}
		return s
	case "archived list":
		s := fmt.Sprintf("account %s: its history archived up to v%s holds %s %s (%s credits", f[0], f[1], f[3], f[2], f[4])
		l := fmt.Sprintf("its boundary lists %s (%s credits", f[6], f[7])
		if f[2] == "purchases" {
			s += ", " + f[5] + " cents"
			l += ", " + f[8] + " cents"
		}
		return s + ") by its archived totals and daily sums, but " + l + ")"
	case "bonus twice":
		return fmt.Sprintf("%s: outage %q credited %s times (%s), but a bonus is granted once per outage and account", owner(f[0]), f[1], f[2], f[3])
	case "bonus without grant":
		return fmt.Sprintf("%s: BonusGranted of outage %q (%s), which bonus_grants does not hold", owner(f[0]), f[1], f[3])
	case "bonus credits differ":
		return fmt.Sprintf("%s: BonusGranted of outage %q (%s) credits %s, its grant %s", owner(f[0]), f[1], f[3], creditRange(f[4], f[5]), f[6])
	case "bonus reason differs":
		return fmt.Sprintf("%s: BonusGranted of outage %q (%s) gives the reason %q, its grant %q", owner(f[0]), f[1], f[2], f[3], f[4])
	case "bonus ineligible":
		return fmt.Sprintf("%s: BonusGranted of outage %q (%s), but at the grant's granted_at %s the account had no active or grace key: a bonus goes to the accounts that had one",
			owner(f[0]), f[1], f[2], f[3])
	case "bonus missing":
		return fmt.Sprintf("%s: no BonusGranted of outage %q, but at the grant's granted_at %s the account had an active or grace key: a finished grant credits every account that had one",
			owner(f[0]), f[1], f[2])
	case "grant accounts":
		return fmt.Sprintf("bonus grant %q: credited %s accounts, but the store holds %s BonusGranted facts of it", f[0], f[1], f[2])
	}
	return kind + ": " + strings.Join(f, ", ")
}

func creditRange(lo, hi string) string {
	if lo == hi {
		return lo
	}
	return lo + " to " + hi
}
