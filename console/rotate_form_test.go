package console_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/internal/apptest"
)

// The rotate form promises that the active key keeps working for 24 hours. Sent twice (a
// double click, a resent form), it must rotate once: a second rotation would revoke the
// customer's live key at once, for a key nobody was shown. The second answer leads to the
// first one's key; a form shown before another rotation issues nothing.
func TestADoubleSubmittedRotateRotatesOnce(t *testing.T) {
	svc := apptest.Start(t, 60)
	id := openAccountViaAdmin(t, svc, "Rotate Co", "rotate@example.com")
	liveID, live := issueViaAdmin(t, svc, id)
	if st, b := svc.Read(t, "/api/data/towns", live); st == http.StatusUnauthorized || st == http.StatusForbidden {
		t.Fatalf("live key refused before any rotation: %d %s", st, b)
	}

	c, csrf := signedInConsole(t, svc)
	form := issueFormOf(t, c, svc, id, csrf)
	if form.Get("from_key") != liveID {
		t.Fatalf("the rotate form does not name the active key %s: %v", liveID, form)
	}
	var locations []string
	for i := range 2 {
		resp, err := c.PostForm(svc.AdminURL+"/console/accounts/"+id+"/keys", form)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("submit %d of the rotate form: %d", i+1, resp.StatusCode)
		}
		locations = append(locations, resp.Header.Get("Location"))
	}
	if locations[0] != locations[1] {
		t.Errorf("the two submissions led to %v: two keys issued", locations)
	}
	if st, b := svc.Read(t, "/api/data/towns", live); st == http.StatusForbidden || st == http.StatusUnauthorized {
		t.Fatalf("after one double-clicked rotation the live key is refused at once: %d %s", st, b)
	}
	resp, err := c.Get(svc.AdminURL + locations[1])
	if err != nil {
		t.Fatal(err)
	}
	if page := readAll(t, resp); !strings.Contains(page, "svc_live_") {
		t.Errorf("the second submission's page does not show the key the first issued:\n%s", page)
	}
	st, body := svc.Admin(t, http.MethodGet, "/admin/accounts/"+id, "")
	if n := strings.Count(body, `"state":"active"`) + strings.Count(body, `"state":"grace"`); st != http.StatusOK || n != 2 {
		t.Errorf("after one rotation: %d keys active or in grace, want 2: %s", n, body)
	}

	// The same form shown before that rotation, shown again and sent anew, issues nothing.
	stale := url.Values{"csrf": {csrf}, "from_key": {liveID}, "form": {"another-page"}}
	resp, err = c.PostForm(svc.AdminURL+"/console/accounts/"+id+"/keys", stale)
	if err != nil {
		t.Fatal(err)
	}
	if page := readAll(t, resp); resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "changed since") {
		t.Errorf("a stale rotate form: %d, want 400 saying the keys changed:\n%s", resp.StatusCode, page)
	}
	if st, b := svc.Read(t, "/api/data/towns", live); st == http.StatusForbidden || st == http.StatusUnauthorized {
		t.Errorf("a stale rotate form revoked the live key: %d %s", st, b)
	}
}

// issueFormOf reads the account page's key-issue form as a browser would send it.
func issueFormOf(t *testing.T, c *http.Client, svc *apptest.Service, id, csrf string) url.Values {
	t.Helper()
	resp, err := c.Get(svc.AdminURL + "/console/accounts/" + id)
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(t, resp)
	from, form := hiddenField("from_key").FindStringSubmatch(page), hiddenField("form").FindStringSubmatch(page)
	if from == nil || form == nil {
		t.Fatalf("no key-issue form on the account page: %d %s", resp.StatusCode, page)
	}
	return url.Values{"csrf": {csrf}, "from_key": {from[1]}, "form": {form[1]}}
}

// issueViaAdmin issues a key to the account through the admin API: its id and the key.
func issueViaAdmin(t *testing.T, svc *apptest.Service, accountID string) (keyID, apiKey string) {
	t.Helper()
	st, body := svc.Admin(t, http.MethodPost, "/admin/accounts/"+accountID+"/keys", "")
	var issued struct {
		Data struct {
			KeyID  string `json:"key_id"`
			APIKey string `json:"api_key"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &issued); err != nil || st != http.StatusCreated {
		t.Fatalf("issue: %d %s", st, body)
	}
	return issued.Data.KeyID, issued.Data.APIKey
}
