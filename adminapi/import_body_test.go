package adminapi_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
)

// An import whose upload breaks off (a chunked body cut short, or a malformed chunk) is the
// client's fault: 400 naming the body, nothing imported, never 503 as if the database had gone.
func TestAnImportWhoseBodyBreaksOffIs400(t *testing.T) {
	f := newFixture(t)
	line := `{"type":"town","slug":"cut-short","name":"Cut Short","county":"Fayette","population":1}` + "\n"
	for name, chunks := range map[string]string{
		"cut short":       "10\r\n" + line[:16] + "\r\n" + "40\r\n" + line[16:30],
		"malformed chunk": "zz\r\n" + line,
	} {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Write([]byte("POST /admin/catalog/import HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + adminToken +
				"\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks))
			if err != nil {
				t.Fatal(err)
			}
			_ = c.(*net.TCPConn).CloseWrite()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400", resp.StatusCode)
			}
		})
	}
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM streams WHERE stream_id LIKE '%cut-short%'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("towns imported: %d, %v", n, err)
	}
}
