package adminapi_test

import (
	"testing"
	"time"
)

// A key revoked during its grace, by a second rotation or by a revoke, stopped working then:
// GET /admin/accounts/{id} shows its grace_until as that instant, not the end of the 24 hours
// it no longer has, which reads as a key that still works until tomorrow (docs/api.md,
// "Admin API"). A key in grace still shows the end of its 24 hours.
func TestAKeyRevokedDuringItsGraceShowsItsGraceEndedThen(t *testing.T) {
	svc, id, issue := rotationAccount(t)
	k1 := issue()
	k2 := issue()
	before := time.Now().UTC()
	k3 := issue() // revokes k1, in grace, at once
	st, body := svc.Admin(t, "POST", "/admin/accounts/"+id+"/keys/"+k2["key_id"].(string)+"/revoke", "")
	dataOf(t, st, body, 200)
	after := time.Now().UTC()
	k4 := issue() // k3 into grace

	st, body = svc.Admin(t, "GET", "/admin/accounts/"+id, "")
	keys := map[string]map[string]any{}
	for _, k := range dataOf(t, st, body, 200)["keys"].([]any) {
		keys[k.(map[string]any)["key_id"].(string)] = k.(map[string]any)
	}
	for _, k := range []map[string]any{k1, k2} {
		v := keys[k["key_id"].(string)]
		g, err := time.Parse(time.RFC3339Nano, v["grace_until"].(string))
		if v["state"] != "revoked" || err != nil || g.Before(before.Add(-time.Second)) || g.After(after.Add(time.Second)) {
			t.Errorf("key %s: %v; want revoked with grace_until when it was revoked (between %s and %s)", k["key_id"], v, before, after)
		}
	}
	v := keys[k3["key_id"].(string)]
	if g, err := time.Parse(time.RFC3339Nano, v["grace_until"].(string)); v["state"] != "grace" || err != nil || g.Before(after.Add(23*time.Hour)) {
		t.Errorf("key in grace: %v; want its 24 hours", v)
	}
	if v := keys[k4["key_id"].(string)]; v["state"] != "active" || v["grace_until"] != nil {
		t.Errorf("active key: %v", v)
	}
}
