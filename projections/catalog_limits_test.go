package projections_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/projections"
)

// What the import accepts at its limits the catalog projection can apply: a name of 300
// four-byte letters is indexed (its normalized name stays under a btree entry's 2,704 bytes),
// the last second of the year 9999 in UTC is served as JSON, and counts of 2^31-1 fit the
// tables' integers. One past either limit is
// refused by the import (domain TestBadLinesAreReportedByLineAndField).
func TestACatalogRecordAtTheImportsLimitsIsProjected(t *testing.T) {
	pool := pgtest.NewPool(t)
	name := strings.Repeat("𝔸", 300)
	evs := catalogImport(t, pool, []byte(`{"record":"town","slug":"big","name":"Big","population":2147483647}`+"\n"+
		`{"record":"place","place_id":"p-limits","name":"`+name+`","category":"food","rating_count":2147483647,`+
		`"review_summary":{"summary":"s","review_count":2147483647,"generated_at":"9999-12-31T23:59:59Z"},`+
		`"sources":{"name":[{"source":"a","value":"x","observed_at":"9999-12-31T18:59:59-05:00"}]}}`+"\n"))
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		return projections.Catalog{Clock: func() time.Time { return catalogNow }}.Apply(context.Background(), tx, evs)
	})
	if err != nil {
		t.Fatalf("the catalog projection cannot apply a record the import accepted: %v", err)
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT octet_length(normalized_name) FROM rm_places WHERE place_id = 'p-limits'`).Scan(&n); err != nil || n != 1200 {
		t.Fatalf("normalized name of %d bytes (%v), want 1200", n, err)
	}
}
