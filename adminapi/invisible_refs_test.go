package adminapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/internal/apptest"
)

// A payment_ref that begins or ends with white space or an invisible character is 400
// bad_request, never taken as another reference (docs/api.md): "pay-7" followed by a character that
// renders as nothing must not record the same payment a second time. These characters are all
// Default_Ignorable_Code_Point in Unicode (rendered invisibly), none of them white space,
// control or format (Cf) characters.
func TestAPaymentRefEndingInAnIgnorableCharacterIsRefused(t *testing.T) {
	svc := apptest.Start(t, 60)
	st, body := svc.Admin(t, http.MethodPost, "/admin/accounts", `{"name":"Refs Co","email":"refs@example.com"}`)
	var opened struct {
		Data struct {
			AccountID string `json:"account_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &opened); err != nil || st != http.StatusCreated {
		t.Fatalf("open: %d %s", st, body)
	}
	id := opened.Data.AccountID
	if st, b := svc.Admin(t, http.MethodPost, "/admin/accounts/"+id+"/purchases", `{"amount_cents":500,"payment_ref":"pay-7"}`); st != http.StatusCreated {
		t.Fatalf("first purchase: %d %s", st, b)
	}
	for name, ref := range map[string]string{
		"U+3164 HANGUL FILLER":                     "pay-7\u3164",
		"U+FE0F VARIATION SELECTOR-16":             "pay-7\ufe0f",
		"U+034F COMBINING GRAPHEME JOINER":         "pay-7\u034f",
		"U+115F HANGUL CHOSEONG FILLER (leading)":  "\u115fpay-7",
		"U+180B MONGOLIAN FREE VARIATION SELECTOR": "pay-7\u180b",
	} {
		b, _ := json.Marshal(ref)
		st, body := svc.Admin(t, http.MethodPost, "/admin/accounts/"+id+"/purchases", `{"amount_cents":500,"payment_ref":`+string(b)+`}`)
		if st != http.StatusBadRequest || !strings.Contains(body, "bad_request") {
			t.Errorf("payment_ref %q (%s): %d %s, want 400 bad_request", ref, name, st, body)
		}
	}
	st, body = svc.Admin(t, http.MethodGet, "/admin/accounts/"+id, "")
	var acct struct {
		Data struct {
			Balance int64 `json:"balance"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &acct); err != nil || st != http.StatusOK {
		t.Fatalf("get: %d %s", st, body)
	}
	if acct.Data.Balance != 1000 {
		t.Errorf("balance %d after one payment pay-7 of $5 and the same reference with invisible characters: want 1000", acct.Data.Balance)
	}
}
