package adminapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// A ledger export that fails after its header ends as a broken transfer, never as a short file
// that looks complete (docs/api.md, "Statements, ledger export and digests"). Over HTTP/1.1 the
// chunked body lacks its last chunk. An HTTP/1.0 request (curl -0; nginx speaks it to its
// upstream unless told otherwise) has no chunks: the body ends where the connection closes,
// so a close after the failure read as the end of a complete export. It must read as broken
// too. Here the export's second page cannot be read (an event no decoder reads, written past
// the commands), after a first page of 1,000 facts was sent.
func TestALedgerExportThatFailsMidwayIsBrokenOverHTTP10Too(t *testing.T) {
	f := newFixture(t)
	acc := f.openAccount("Exported")
	stream := domain.AccountStream(acc)
	store := eventstore.New(f.pool)
	err := store.WithTx(context.Background(), func(tx pgx.Tx) error {
		heads, err := eventstore.OpenHeads(context.Background(), tx, true, stream)
		if err != nil {
			return err
		}
		var events []eventstore.NewEvent
		for range 1000 {
			events = append(events, eventstore.NewEvent{Type: domain.EventRateLimitSet, Payload: domain.RateLimitSet{AccountID: acc}})
		}
		events = append(events, eventstore.NewEvent{Type: domain.EventRequestCharged, Payload: json.RawMessage(`{"k":"not a number"}`)})
		_, err = eventstore.Append(context.Background(), tx, heads[stream], time.Now(), events...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		t.Run(proto, func(t *testing.T) {
			conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "GET /admin/accounts/%s/ledger.csv %s\r\nHost: admin\r\nAuthorization: Bearer %s\r\n\r\n", acc, proto, adminToken)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Logf("the answer broke off before its header was read: %v", err)
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			rows := strings.Count(string(body), "\n")
			if err == nil {
				t.Fatalf("an export that failed after %d lines reads as a complete file (status %d, %s)", rows, resp.StatusCode, proto)
			}
			t.Logf("%d lines, then %v", rows, err)
		})
	}
}
