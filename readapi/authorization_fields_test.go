package readapi_test

import (
	"io"
	"net/http"
	"testing"
)

// A request carrying Authorization twice is malformed (the field is not a list, RFC 9110
// §5.3): it is 401 missing_api_key, whichever key comes first, never served and charged to
// the account of the first one (decisions.md: a malformed Authorization is 401
// missing_api_key). A proxy that adds its own Authorization in front of the client's would
// otherwise decide which account pays.
func TestTwoAuthorizationFieldsAreAMalformedHeader(t *testing.T) {
	s := newStack(t)
	account, key := s.customer(500)
	_, other := s.customer(500)
	before := s.balance(account)
	for _, second := range []string{"Bearer " + other, "Bearer junk", "Bearer " + key} {
		req, err := http.NewRequest(http.MethodGet, s.server.URL+"/api/data/towns", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Add("Authorization", "Bearer "+key)
		req.Header.Add("Authorization", second)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		r := response{Status: resp.StatusCode, Header: resp.Header, Body: body}
		r.expectError(t, http.StatusUnauthorized, "missing_api_key")
	}
	if after := s.balance(account); after != before {
		t.Fatalf("the account of the first key was charged: balance %d, was %d", after, before)
	}
}
