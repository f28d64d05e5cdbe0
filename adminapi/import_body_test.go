package adminapi_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
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

// A compressed body (Content-Encoding: gzip) is refused as such, 415, before it is read: read
// as it came it failed on its first byte as "a NUL character on line 1" (found by review).
func TestACompressedBodyIs415NamingItsEncoding(t *testing.T) {
	f := newFixture(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"record":"town","slug":"zipped","name":"Zipped"}` + "\n"))
	_ = zw.Close()
	for _, path := range []string{"/admin/catalog/import", "/admin/accounts"} {
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, bytes.NewReader(gz.Bytes()))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		req.Header.Set("Content-Encoding", "gzip")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Error, Code string }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnsupportedMediaType || body.Code != "bad_request" || !strings.Contains(body.Error, "gzip") {
			t.Errorf("%s gzipped: %d %+v, want 415 bad_request naming gzip", path, resp.StatusCode, body)
		}
	}
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM streams WHERE stream_id LIKE '%zipped%'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("towns imported: %d, %v", n, err)
	}
}
