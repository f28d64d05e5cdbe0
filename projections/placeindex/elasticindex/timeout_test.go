package elasticindex

import (
	"context"
	"net"
	"testing"
	"time"
)

// A cluster that accepts connections and never answers ends Open with an error (serve then
// exits naming the place index), instead of holding it for ever.
func TestOpenEndsWhenTheClusterNeverAnswers(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	defer func(was time.Duration) { openTimeout = was }(openTimeout)
	openTimeout = 300 * time.Millisecond
	if _, err := Open(context.Background(), "http://"+silent.Addr().String(), "places"); err == nil {
		t.Fatal("Open of a cluster that never answers succeeded")
	}
}
