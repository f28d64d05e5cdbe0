package elasticindex_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/kyapi/kyapi/projections/placeindex"
	"github.com/kyapi/kyapi/projections/placeindex/elasticindex"
	"github.com/kyapi/kyapi/projections/placeindex/placeindextest"
)

func TestContract(t *testing.T) {
	url := os.Getenv("ELASTICSEARCH_URL")
	if url == "" {
		t.Skip("ELASTICSEARCH_URL not set: Elasticsearch contract tests need a running Elasticsearch 8.x; none can be installed on this machine")
	}
	open := func(t *testing.T, prefix string) *elasticindex.Index {
		t.Helper()
		idx, err := elasticindex.Open(context.Background(), url, prefix)
		if err != nil {
			t.Fatalf("Open(%s): %v", prefix, err)
		}
		return idx
	}
	placeindextest.Run(t,
		func(t *testing.T) placeindex.Index {
			// Each subtest gets its own prefix, and so its own alias,
			// generations and checkpoint index, all dropped afterwards.
			b := make([]byte, 6)
			rand.Read(b)
			prefix := "placeindex-test-" + hex.EncodeToString(b)
			idx := open(t, prefix)
			t.Cleanup(func() {
				if err := idx.Drop(context.Background()); err != nil {
					t.Errorf("dropping %s: %v", prefix, err)
				}
			})
			return idx
		},
		placeindextest.WithReopen(func(t *testing.T, old placeindex.Index) placeindex.Index {
			idx := old.(*elasticindex.Index)
			if err := idx.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return open(t, idx.Prefix())
		}),
	)
}
