package console_test

import (
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/internal/apptest"
)

// adminError is the sentence of an admin API error body.
func adminError(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" {
		t.Fatalf("admin API error body: %s", body)
	}
	return e.Error
}

// recordedPaymentRefs lists the payment_ref of every CreditsPurchased fact in the account's ledger.
func recordedPaymentRefs(t *testing.T, svc *apptest.Service, id string) []string {
	t.Helper()
	st, body := svc.Admin(t, http.MethodGet, "/admin/accounts/"+id+"/ledger?limit=1000", "")
	var page struct {
		Data []struct {
			Type    string `json:"type"`
			Payload struct {
				PaymentRef string `json:"payment_ref"`
			} `json:"payload"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil || st != http.StatusOK {
		t.Fatalf("ledger: %d %s", st, body)
	}
	var refs []string
	for _, e := range page.Data {
		if e.Type == "CreditsPurchased" {
			refs = append(refs, e.Payload.PaymentRef)
		}
	}
	return refs
}

// The admin API takes a payment_ref exactly as written: one that begins or ends with white
// space is 400 and never read as the reference without it (docs/api.md, "Admin API";
// commands.ValidateReference). The console records a purchase with the same command
// (docs/console.md), so it takes the reference as typed too: at its review step it refuses
// such a reference with 400 and the admin API's error naming payment_ref, before any confirm
// form, and never records " pay-7 " as "pay-7".
func TestTheConsoleRecordsThePaymentRefAsTyped(t *testing.T) {
	svc := apptest.Start(t, 60)
	id := openAccountViaAdmin(t, svc, "Ref Co", "ref@example.com")

	refused := map[string]string{}
	for _, typed := range []string{" pay-7 ", "pay-8\u00a0"} {
		// The admin API refuses it.
		b, _ := json.Marshal(typed)
		st, body := svc.Admin(t, http.MethodPost, "/admin/accounts/"+id+"/purchases", `{"amount_cents":500,"payment_ref":`+string(b)+`}`)
		if st != http.StatusBadRequest {
			t.Fatalf("admin API, payment_ref %q: %d %s; want 400", typed, st, body)
		}
		if refused[typed] = adminError(t, body); !strings.HasPrefix(refused[typed], "payment_ref: ") {
			t.Fatalf("admin API, payment_ref %q: %q does not name payment_ref", typed, refused[typed])
		}
	}

	c, csrf := signedInConsole(t, svc)
	before := balanceViaAdmin(t, svc, id)
	for _, typed := range []string{" pay-7 ", "pay-8\u00a0"} {
		resp, err := c.PostForm(svc.AdminURL+"/console/accounts/"+id+"/purchases/review",
			url.Values{"csrf": {csrf}, "dollars": {"5"}, "payment_ref": {typed}})
		if err != nil {
			t.Fatal(err)
		}
		review := readAll(t, resp)
		cents, ref := hiddenField("amount_cents").FindStringSubmatch(review), hiddenField("payment_ref").FindStringSubmatch(review)
		if cents == nil || ref == nil {
			// Refused at review, as the admin API refuses it: what the contract asks.
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(review, html.EscapeString(refused[typed])) {
				t.Errorf("review of payment_ref %q: %d without a confirm form, want 400 saying %q", typed, resp.StatusCode, refused[typed])
			}
			continue
		}
		if ref[1] != typed {
			t.Errorf("review of payment_ref %q: its confirm form carries payment_ref %q", typed, ref[1])
		}
		resp, err = c.PostForm(svc.AdminURL+"/console/accounts/"+id+"/purchases",
			url.Values{"csrf": {csrf}, "amount_cents": {cents[1]}, "payment_ref": {ref[1]}})
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		t.Logf("confirm of %q: %d", typed, resp.StatusCode)
	}
	refs := recordedPaymentRefs(t, svc, id)
	if len(refs) > 0 {
		t.Errorf("the console recorded purchases under %q for references typed as %q and %q, which the admin API refuses (balance %d -> %d)",
			refs, " pay-7 ", "pay-8\u00a0", before, balanceViaAdmin(t, svc, id))
	}
}

// The same holds for a bonus grant's outage_id (commands.GrantBonus validates it with
// commands.ValidateReference): the console refuses " out-1 " at review, and never grants it
// as "out-1".
func TestTheConsoleGrantsTheOutageIDAsTyped(t *testing.T) {
	svc := apptest.Start(t, 60)
	const typed = " out-1 "
	st, body := svc.Admin(t, http.MethodPost, "/admin/bonus-grants", `{"outage_id":" out-1 ","credits":10,"reason":"r"}`)
	if st != http.StatusBadRequest {
		t.Fatalf("admin API, outage_id %q: %d %s; want 400", typed, st, body)
	}
	refused := adminError(t, body)
	if !strings.HasPrefix(refused, "outage_id: ") {
		t.Fatalf("admin API, outage_id %q: %q does not name outage_id", typed, refused)
	}
	c, csrf := signedInConsole(t, svc)
	resp, err := c.PostForm(svc.AdminURL+"/console/bonus-grants/review", url.Values{"csrf": {csrf}, "outage_id": {typed}, "credits": {"10"}, "reason": {"r"}})
	if err != nil {
		t.Fatal(err)
	}
	review := readAll(t, resp)
	m := hiddenField("outage_id").FindStringSubmatch(review)
	if m == nil {
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(review, html.EscapeString(refused)) {
			t.Errorf("review of outage_id %q: %d without a confirm form, want 400 saying %q", typed, resp.StatusCode, refused)
		}
		return
	}
	if m[1] != typed {
		t.Errorf("review of outage_id %q: its confirm form carries outage_id %q", typed, m[1])
	}
	resp, err = c.PostForm(svc.AdminURL+"/console/bonus-grants", url.Values{"csrf": {csrf}, "outage_id": {m[1]}, "credits": {"10"}, "reason": {"r"}})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if st, body := svc.Admin(t, http.MethodGet, "/admin/bonus-grants/out-1", ""); st == http.StatusOK {
		t.Errorf("the console recorded a grant under %q for the outage id typed as %q: %s", "out-1", typed, body)
	}
}

// A form carries bytes as sent, where the admin API's JSON carries text. An outage id or a
// payment reference that is not UTF-8, or holds a NUL, is refused with 400 naming its field,
// at review (no confirm form: the page could not show it unaltered, and a NUL shown and sent
// back is another id) and at confirm. Nothing is recorded.
func TestTheConsoleRefusesAReferenceThatIsNotText(t *testing.T) {
	svc := apptest.Start(t, 60)
	id := openAccountViaAdmin(t, svc, "Bytes Co", "bytes@example.com")
	if st, body := svc.Admin(t, http.MethodPost, "/admin/accounts/"+id+"/keys", ""); st != http.StatusCreated {
		t.Fatalf("issue key: %d %s", st, body) // so that a grant would reach the account
	}
	c, csrf := signedInConsole(t, svc)
	for _, typed := range []string{"out\x00-1", "out-\xff\xfe", "pay\x00-1", "pay-\xc3"} {
		path, field, form := "/console/bonus-grants", "outage_id", url.Values{"csrf": {csrf}, "outage_id": {typed}, "credits": {"10"}, "reason": {"r"}}
		if strings.HasPrefix(typed, "pay") {
			path, field, form = "/console/accounts/"+id+"/purchases", "payment_ref", url.Values{"csrf": {csrf}, "dollars": {"5"}, "amount_cents": {"500"}, "payment_ref": {typed}}
		}
		for _, step := range []string{path + "/review", path} {
			resp, err := c.PostForm(svc.AdminURL+step, form)
			if err != nil {
				t.Fatal(err)
			}
			page := readAll(t, resp)
			if resp.StatusCode != http.StatusBadRequest || hiddenField(field).MatchString(page) || !strings.Contains(page, field+": ") {
				t.Errorf("POST %s with %s %q: %d (confirm form shown: %v), want 400 naming %s and no confirm form",
					step, field, typed, resp.StatusCode, hiddenField(field).MatchString(page), field)
			}
		}
	}
	if b := balanceViaAdmin(t, svc, id); b != 0 {
		t.Errorf("balance %d after refused grants and purchases, want 0", b)
	}
}
