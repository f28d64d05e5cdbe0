package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/internal/pgtest"
)

// Headers past the 16 KiB limit are refused with a 431 and the error body before any
// handler runs, so an oversized Authorization header cannot reach the key lookup; past the
// 64 KiB hard cap net/http itself refuses them.
func TestOversizedHeadersAreRefused(t *testing.T) {
	t.Parallel()
	s := startServe(t, serveConfig{Name: "limits", DatabaseURL: pgtest.NewDatabase(t)})
	req, _ := http.NewRequest(http.MethodGet, s.ReadURL+"/api/data/towns", nil)
	req.Header.Set("Authorization", "Bearer svc_live_"+strings.Repeat("a", 32<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || !strings.Contains(string(body), `"code":"bad_request"`) {
		t.Fatalf("32 KiB Authorization header: status %d %s, want 431 with the error body", resp.StatusCode, body)
	}
	req.Header.Set("Authorization", "Bearer svc_live_"+strings.Repeat("a", 128<<10))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("128 KiB Authorization header: status %d, want 431", resp.StatusCode)
	}
	if strings.Contains(s.Output(), strings.Repeat("a", 64)) {
		t.Fatal("the oversized header reached the log")
	}
}
