package adminapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/internal/apptest"
)

// Once POST /admin/catalog/import has answered 200, the read API of the process that took it
// serves what it imported: the place's detail, and the place in a keyword list (the place
// index). A client that imports and then reads must not get 404 or an empty list for a place
// the import just reported as imported.
func TestAPlaceImportedThroughTheAdminAPIIsServedAsSoonAsTheImportAnswers(t *testing.T) {
	svc := apptest.Start(t, 100000)
	key := openFundedAccount(t, svc)
	for i := range 20 {
		id := fmt.Sprintf("plc_visible_%02d", i)
		word := fmt.Sprintf("zanzibar%02d", i)
		line := fmt.Sprintf(`{"record":"place","place_id":%q,"name":"Cafe %s","category":"food.cafe","town_slug":"berea","latitude":37.57,"longitude":-84.29}`, id, word)
		if st, b := svc.Admin(t, http.MethodPost, "/admin/catalog/import", line+"\n"); st != http.StatusOK {
			t.Fatalf("import %d: %d %s", i, st, b)
		}
		if st, b := svc.Read(t, "/api/data/places/"+id, key); st != http.StatusOK {
			t.Fatalf("import %d: detail right after the import answered %d %s, want 200", i, st, b)
		}
		st, b := svc.Read(t, "/api/data/places?q="+word, key)
		if st != http.StatusOK || !strings.Contains(b, `"place_id":"`+id+`"`) {
			t.Fatalf("import %d: list ?q=%s right after the import answered %d %s, want the place", i, word, st, b)
		}
	}
}

// openFundedAccount opens an account, buys it credits and returns a new key.
func openFundedAccount(t *testing.T, svc *apptest.Service) string {
	t.Helper()
	var opened struct {
		Data struct {
			AccountID string `json:"account_id"`
		} `json:"data"`
	}
	st, b := svc.Admin(t, http.MethodPost, "/admin/accounts", `{"name":"Reader","email":"reader@example.com"}`)
	if err := json.Unmarshal([]byte(b), &opened); err != nil || st != http.StatusCreated {
		t.Fatalf("open: %d %s", st, b)
	}
	id := opened.Data.AccountID
	if st, b := svc.Admin(t, http.MethodPost, "/admin/accounts/"+id+"/purchases", `{"amount_cents":5000,"payment_ref":"visible-1"}`); st != http.StatusCreated {
		t.Fatalf("purchase: %d %s", st, b)
	}
	var issued struct {
		Data struct {
			APIKey string `json:"api_key"`
		} `json:"data"`
	}
	st, b = svc.Admin(t, http.MethodPost, "/admin/accounts/"+id+"/keys", "")
	if err := json.Unmarshal([]byte(b), &issued); err != nil || st != http.StatusCreated {
		t.Fatalf("key: %d %s", st, b)
	}
	return issued.Data.APIKey
}
