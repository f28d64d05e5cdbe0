package app

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/eventstore"
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

// An Elasticsearch index of this database that went on past it (fed from a copy restored from
// a backup, or a replica promoted behind its primary) is refused as well, and the error says
// that and how to rebuild it, not that the index serves another database.
func TestServeRefusesAnElasticsearchIndexPastItsDatabasesHistory(t *testing.T) {
	ctx := context.Background()
	idx, err := bleveindex.Open(filepath.Join(t.TempDir(), "placeindex")) // stands for the shared index
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	pool := pgtest.NewPool(t)
	store, err := eventstore.StoreID(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	past := "900000/900000 store=" + store // no event of this store is there
	if err := idx.Upsert(ctx, nil, nil, past); err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	err = claimPlaceIndex(ctx, Config{ElasticsearchURL: "http://127.0.0.1:9200"}, projections.PlaceIndex{Pool: pool, Index: idx}, log)
	var ahead *projections.ErrIndexPastStore
	if !errors.As(err, &ahead) || !strings.Contains(err.Error(), "kyapi rebuild") || strings.Contains(err.Error(), "another database") {
		t.Errorf("claiming an Elasticsearch index past this database's history: %v; want it refused as such, naming kyapi rebuild, not as another database's", err)
	}
	if cp, err := idx.Checkpoint(ctx); err != nil || cp != past {
		t.Errorf("the refused index's checkpoint is now %q, %v; want it untouched, %q", cp, err, past)
	}
}
