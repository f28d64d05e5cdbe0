package adminapi_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Authorization sent twice is a malformed header (RFC 9110 §5.3: the field is not a list),
// 401 missing_api_key, as on the read API: not authorized by whichever field came first.
func TestTwoAuthorizationFieldsAreRefusedByTheAdminAPI(t *testing.T) {
	f := newFixture(t)
	for _, second := range []string{"Bearer " + adminToken, "Bearer wrong-token"} {
		req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/admin/accounts", strings.NewReader(`{"name":"A","email":"a@example.com"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Add("Authorization", "Bearer "+adminToken)
		req.Header.Add("Authorization", second)
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(raw), `"code":"missing_api_key"`) {
			t.Errorf("second field %q: %d %s, want 401 missing_api_key", second, resp.StatusCode, raw)
		}
	}
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM accounts`).Scan(&n); err != nil || n != 0 {
		t.Errorf("refused calls opened %d accounts (err %v)", n, err)
	}
}
