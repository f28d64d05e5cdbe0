package app

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/projections"
	"github.com/kyapi/kyapi/projections/placeindex/bleveindex"
)

// An Elasticsearch index is shared by every process on the cluster, and one built from another
// database may still serve it: serve refuses it, naming ELASTICSEARCH_URL and `kyapi rebuild`,
// and leaves it as it is (docs/operations.md, "The place index and its event store"). Rebuilt
// at every start instead, two deployments sharing a cluster would undo each other's index.
func TestServeRefusesAnElasticsearchIndexBuiltFromAnotherDatabase(t *testing.T) {
	ctx := context.Background()
	idx, err := bleveindex.Open(filepath.Join(t.TempDir(), "placeindex")) // stands for the shared index
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	const foreign = "7/3 store=00000000-0000-4000-8000-000000000000"
	if err := idx.Upsert(ctx, nil, nil, foreign); err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	pi := projections.PlaceIndex{Pool: pgtest.NewPool(t), Index: idx}
	err = claimPlaceIndex(ctx, Config{ElasticsearchURL: "http://127.0.0.1:9200"}, pi, log)
	var other *projections.ErrIndexOfAnotherStore
	if !errors.As(err, &other) || !strings.Contains(err.Error(), "ELASTICSEARCH_URL") || !strings.Contains(err.Error(), "kyapi rebuild") {
		t.Errorf("claiming an Elasticsearch index of another database: %v; want it refused, naming ELASTICSEARCH_URL and kyapi rebuild", err)
	}
	if cp, err := idx.Checkpoint(ctx); err != nil || cp != foreign {
		t.Errorf("the refused index's checkpoint is now %q, %v; want it untouched, %q", cp, err, foreign)
	}
}
