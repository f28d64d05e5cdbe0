package elasticindex

import (
	"context"
	"testing"
	"time"

	"github.com/kyapi/kyapi/internal/silenttest"
)

// A cluster that accepts connections and never answers ends Open with an error (serve then
// exits naming the place index), instead of holding it for ever.
func TestOpenEndsWhenTheClusterNeverAnswers(t *testing.T) {
	silent := silenttest.Addr(t)
	defer func(was time.Duration) { openTimeout = was }(openTimeout)
	openTimeout = 300 * time.Millisecond
	if _, err := Open(context.Background(), "http://"+silent, "places"); err == nil {
		t.Fatal("Open of a cluster that never answers succeeded")
	}
}
