package eventstore_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/pgtest"
)

// A page of a long stream reads the page, not the rest of the stream, whichever plan PostgreSQL
// makes: planned for the parameters' values (the first five executions on a connection), it
// sorted every later event of the stream to keep a hundred.
func TestAPageOfALongStreamReadsOnlyThePageWithEitherPlan(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const events = 200_000
	if _, err := pool.Exec(ctx, `
		INSERT INTO streams (stream_id, version) VALUES ('account-long', 200000);
		INSERT INTO streams (stream_id, version) SELECT 'account-o' || g, 1 FROM generate_series(1, 50) g;
		INSERT INTO events (version, recorded_at, stream_no, type, hash, payload)
			SELECT g, now(), (SELECT stream_no FROM streams WHERE stream_id = 'account-long'), 'RequestCharged', '\x00', '{}'
			FROM generate_series(1, 200000) g;
		INSERT INTO events (version, recorded_at, stream_no, type, hash, payload)
			SELECT 1, now(), stream_no, 'KeyIssued', '\x00', '{}' FROM streams WHERE stream_id <> 'account-long';
		SELECT kyapi_ensure_event_partitions();
		ANALYZE events;`); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `PREPARE page(text, bigint, int) AS `+eventstore.StreamPageSQL); err != nil {
		t.Fatal(err)
	}
	// maxRows is the most rows any node of the plan produced (the events read).
	maxRows := func(settings string) float64 {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		for _, set := range []string{settings, eventstore.StreamPageSettings} {
			if _, err := tx.Exec(ctx, set); err != nil {
				t.Fatal(err)
			}
		}
		var plan []struct{ Plan json.RawMessage }
		var raw []byte
		if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON, TIMING OFF) EXECUTE page('account-long', 0, 100)`).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
			t.Fatalf("plan %s: %v", raw, err)
		}
		var most float64
		var walk func(n map[string]any)
		walk = func(n map[string]any) {
			if r, ok := n["Actual Rows"].(float64); ok {
				most = max(most, r)
			}
			for _, c := range asNodes(n["Plans"]) {
				walk(c)
			}
		}
		var root map[string]any
		_ = json.Unmarshal(plan[0].Plan, &root)
		walk(root)
		return most
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		if rows := maxRows("SET LOCAL plan_cache_mode = " + mode); rows > 1000 {
			t.Errorf("%s: a page of 100 of a stream of %d events read %.0f rows", mode, events, rows)
		}
	}
}

func asNodes(v any) []map[string]any {
	list, _ := v.([]any)
	out := make([]map[string]any, 0, len(list))
	for _, x := range list {
		if m, ok := x.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}
