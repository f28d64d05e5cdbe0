package adminapi_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/kyapi/kyapi/internal/apptest"
)

func dataOf(t *testing.T, status int, body string, want int) map[string]any {
	t.Helper()
	if status != want {
		t.Fatalf("status %d, want %d: %s", status, want, body)
	}
	var out struct {
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return out.Data
}

func codeOf(body string) string {
	var e struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal([]byte(body), &e)
	return e.Code
}

// rotationAccount starts the service with an account holding 1,000 credits, and returns
// a function that issues it a key through the admin API.
func rotationAccount(t *testing.T) (*apptest.Service, string, func() map[string]any) {
	t.Helper()
	svc := apptest.Start(t, 1000)
	st, body := svc.Admin(t, "POST", "/admin/accounts", `{"name":"Rot","email":"rot@example.com"}`)
	id := dataOf(t, st, body, 201)["account_id"].(string)
	st, body = svc.Admin(t, "POST", "/admin/accounts/"+id+"/purchases", `{"amount_cents":500,"payment_ref":"rot-1"}`)
	dataOf(t, st, body, 201)
	return svc, id, func() map[string]any {
		st, body := svc.Admin(t, "POST", "/admin/accounts/"+id+"/keys", "")
		return dataOf(t, st, body, 201)
	}
}

// Rotation keeps the old key for its grace, and a second rotation revokes the older grace key
// at once (docs/architecture.md, "Invariants and where each is enforced"); revocation is
// immediate: once the revoke call returns, no process serves the key (docs/api.md, "Keys").
// Checked end to end on the read API, including two concurrent rotations.
func TestRotationChainOnTheReadAPI(t *testing.T) {
	svc, id, issue := rotationAccount(t)
	works := func(name string, key string, want int, code string) {
		t.Helper()
		for _, path := range []string{"/api/data/towns", "/api/data/places/no-such-place"} {
			st, body := svc.Read(t, path, key)
			if want == 200 && path != "/api/data/towns" {
				if st != 404 {
					t.Errorf("%s on %s: %d %s, want 404", name, path, st, body)
				}
				continue
			}
			if st != want || (code != "" && codeOf(body) != code) {
				t.Errorf("%s on %s: %d %s, want %d %s", name, path, st, body, want, code)
			}
		}
	}
	k1 := issue()
	works("k1", k1["api_key"].(string), 200, "")
	k2 := issue()
	works("k1 in grace", k1["api_key"].(string), 200, "")
	works("k2", k2["api_key"].(string), 200, "")
	k3 := issue()
	works("k1 after second rotation", k1["api_key"].(string), 403, "revoked_api_key")
	works("k2 in grace", k2["api_key"].(string), 200, "")
	works("k3", k3["api_key"].(string), 200, "")

	// Two rotations at once: both succeed (each is a rotation), and afterwards exactly one key
	// is active and one in grace; every other key is refused.
	var wg sync.WaitGroup
	got := make([]map[string]any, 2)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = issue()
		}()
	}
	wg.Wait()
	st, body := svc.Admin(t, "GET", "/admin/accounts/"+id, "")
	states := map[string]string{}
	count := map[string]int{}
	for _, k := range dataOf(t, st, body, 200)["keys"].([]any) {
		k := k.(map[string]any)
		states[k["key_id"].(string)] = k["state"].(string)
		count[k["state"].(string)]++
	}
	if count["active"] != 1 || count["grace"] != 1 || count["revoked"] != 3 {
		t.Errorf("after two concurrent rotations: %v (%s)", states, body)
	}
	for _, k := range append([]map[string]any{k1, k2, k3}, got...) {
		want := map[string]int{"active": 200, "grace": 200, "revoked": 403}[states[k["key_id"].(string)]]
		code := ""
		if want == 403 {
			code = "revoked_api_key"
		}
		works(k["key_id"].(string)+" "+states[k["key_id"].(string)], k["api_key"].(string), want, code)
	}
	// Revoking the grace key is immediate.
	for kid, s := range states {
		if s == "grace" {
			st, body := svc.Admin(t, "POST", "/admin/accounts/"+id+"/keys/"+kid+"/revoke", "")
			if st != 200 {
				t.Fatalf("revoke: %d %s", st, body)
			}
			for _, k := range got {
				if k["key_id"] == kid {
					works("revoked grace key", k["api_key"].(string), 403, "revoked_api_key")
				}
			}
		}
	}
	if strings.Contains(body, "api_key\"") {
		t.Errorf("account view shows a key: %s", body)
	}
}

// A key issued while no key is active (the active one was revoked) rotates nothing: the key in
// grace keeps the rest of its grace and keeps working, and the next rotation revokes it.
func TestAKeyIssuedWhileNoneIsActiveLeavesTheGraceKeyItsGrace(t *testing.T) {
	svc, id, issue := rotationAccount(t)
	state := func(keyID string) string {
		st, body := svc.Admin(t, "GET", "/admin/accounts/"+id, "")
		for _, k := range dataOf(t, st, body, 200)["keys"].([]any) {
			if k := k.(map[string]any); k["key_id"] == keyID {
				return k["state"].(string)
			}
		}
		t.Fatalf("key %s not in %s", keyID, body)
		return ""
	}
	k1 := issue()
	k2 := issue() // k1 enters grace
	st, body := svc.Admin(t, "POST", "/admin/accounts/"+id+"/keys/"+k2["key_id"].(string)+"/revoke", `{"reason":"leaked"}`)
	dataOf(t, st, body, 200)
	k3 := issue()
	if k3["rotated_key_id"] != nil {
		t.Errorf("a key issued with none active: rotated_key_id %v, want null", k3["rotated_key_id"])
	}
	if s := state(k1["key_id"].(string)); s != "grace" {
		t.Errorf("key in grace after a key issue that rotated nothing: %s, want grace", s)
	}
	if st, body := svc.Read(t, "/api/data/towns", k1["api_key"].(string)); st != 200 {
		t.Errorf("key in grace on the read API: %d %s", st, body)
	}
	issue() // rotates k3: a second rotation while k1 is in grace
	if s := state(k1["key_id"].(string)); s != "revoked" {
		t.Errorf("older grace key after the next rotation: %s, want revoked", s)
	}
}
