package console_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/internal/apptest"
)

// An account whose only key was revoked has no active key; issuing one from the console is a
// legitimate first issue, though its form names no active key as the very first one did: the
// session must not take it for that form sent again.
func TestAnIssueAfterARevokeIssuesANewKey(t *testing.T) {
	svc := apptest.Start(t, 60)
	id := openAccountViaAdmin(t, svc, "Reissue Co", "reissue@example.com")
	c, csrf := signedInConsole(t, svc)

	issue := func(step string) string {
		t.Helper()
		resp, err := c.PostForm(svc.AdminURL+"/console/accounts/"+id+"/keys", issueFormOf(t, c, svc, id, csrf))
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("%s: issue form answered %d", step, resp.StatusCode)
		}
		return resp.Header.Get("Location")
	}
	keys := func() (active int, ids []string) {
		st, body := svc.Admin(t, http.MethodGet, "/admin/accounts/"+id, "")
		var acct struct {
			Data struct {
				Keys []struct {
					KeyID string `json:"key_id"`
					State string `json:"state"`
				} `json:"keys"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(body), &acct); err != nil || st != http.StatusOK {
			t.Fatalf("get account: %d %s", st, body)
		}
		for _, k := range acct.Data.Keys {
			ids = append(ids, k.KeyID+":"+k.State)
			if k.State == "active" {
				active++
			}
		}
		return active, ids
	}

	first := issue("first issue")
	n, ks := keys()
	if n != 1 || len(ks) != 1 {
		t.Fatalf("after the first issue: %v", ks)
	}
	keyID := ks[0][:len(ks[0])-len(":active")]
	if st, b := svc.Admin(t, http.MethodPost, "/admin/accounts/"+id+"/keys/"+keyID+"/revoke", `{"reason":"compromised"}`); st != http.StatusOK {
		t.Fatalf("revoke: %d %s", st, b)
	}
	if n, ks := keys(); n != 0 {
		t.Fatalf("after revoke: %v", ks)
	}

	second := issue("issue after revoke")
	n, ks = keys()
	if n != 1 || len(ks) != 2 {
		t.Errorf("issuing a key for an account whose only key was revoked issued nothing: keys %v; "+
			"the form led to %s (the first issue led to %s)", ks, second, first)
	}
}

// The accounts page lists the keys that work; an account whose keys are all revoked shows
// "none", as one that never had a key does, not an empty cell.
func TestAnAccountWhoseKeysAreAllRevokedShowsNone(t *testing.T) {
	svc := apptest.Start(t, 60)
	id := openAccountViaAdmin(t, svc, "Revoked Co", "revoked@example.com")
	st, body := svc.Admin(t, http.MethodPost, "/admin/accounts/"+id+"/keys", "")
	var issued struct {
		Data struct {
			KeyID string `json:"key_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &issued); st != http.StatusCreated || err != nil {
		t.Fatalf("issue: %d %s", st, body)
	}
	if st, body := svc.Admin(t, http.MethodPost, "/admin/accounts/"+id+"/keys/"+issued.Data.KeyID+"/revoke", ""); st != http.StatusOK {
		t.Fatalf("revoke: %d %s", st, body)
	}
	c, _ := signedInConsole(t, svc)
	resp, err := c.Get(svc.AdminURL + "/console/accounts")
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(t, resp)
	at := strings.Index(page, id)
	end := strings.Index(page[max(at, 0):], "</tr>")
	if at < 0 || end < 0 {
		t.Fatalf("account %s not listed: %s", id, page)
	}
	if row := page[at : at+end]; !strings.Contains(row, `<span class="sub">none</span>`) {
		t.Errorf("the row of an account whose keys are all revoked: %s; want its keys shown as none", row)
	}
}
