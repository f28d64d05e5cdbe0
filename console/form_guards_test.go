package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/internal/apptest"
)

// TestFormsRecordNothingWrong groups the console's guards on its forms: odd
// dollar amounts never record a wrong sum, stored text is escaped, forms need the CSRF token,
// sign-out ends the session and nothing but the sign-in form answers without one.
func TestFormsRecordNothingWrong(t *testing.T) {
	svc := apptest.Start(t, 60)
	evil := `<script>alert(1)</script><img src=x onerror=alert(2)>"'`
	id := openAccountViaAdmin(t, svc, evil, "x@example.com")
	c, csrf := signedInConsole(t, svc)

	// Stored text is escaped on every page showing it.
	for _, p := range []string{"/console/accounts", "/console/accounts?q=script", "/console/accounts/" + id} {
		resp, err := c.Get(svc.AdminURL + p)
		if err != nil {
			t.Fatal(err)
		}
		if body := readAll(t, resp); strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
			t.Errorf("%s renders the account name unescaped", p)
		}
	}

	// Dollar amounts: each is refused or turned into exactly the right cents.
	want := map[string]int64{"1,000": -1, "1e3": -1, " 5": 500, "+5": -1, "05": 500, "５": -1, "٥": -1, "-5": -1, "5.555": -1,
		"99999999999999999999": -1, "0x10": -1, "5.5": 550, "$25.50": 2550, "25000.01": -1, "4.99": -1, "25000": 2500000, "NaN": -1, "5 ": 500}
	for in, cents := range want {
		resp, err := c.PostForm(svc.AdminURL+"/console/accounts/"+id+"/purchases/review",
			url.Values{"csrf": {csrf}, "dollars": {in}, "payment_ref": {"r"}})
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp)
		m := hiddenField("amount_cents").FindStringSubmatch(body)
		switch {
		case cents < 0 && (resp.StatusCode == http.StatusOK || m != nil):
			t.Errorf("dollars %q: accepted (%d, cents %v)", in, resp.StatusCode, m)
		case cents >= 0 && (m == nil || m[1] != itoa(cents)):
			t.Errorf("dollars %q: want %d cents, got %d %v", in, cents, resp.StatusCode, m)
		}
	}

	// Purchase confirm without / with another CSRF token, or from a signed-out client: nothing recorded.
	before := balanceViaAdmin(t, svc, id)
	for _, tok := range []string{"", "forged"} {
		resp, err := c.PostForm(svc.AdminURL+"/console/accounts/"+id+"/purchases", url.Values{"csrf": {tok}, "amount_cents": {"500"}, "payment_ref": {"x-" + tok}})
		if err != nil {
			t.Fatal(err)
		}
		if readAll(t, resp); resp.StatusCode != http.StatusForbidden {
			t.Errorf("csrf %q: %d", tok, resp.StatusCode)
		}
	}
	// The token in the query string is not accepted either.
	resp, err := c.PostForm(svc.AdminURL+"/console/accounts/"+id+"/purchases?csrf="+url.QueryEscape(csrf), url.Values{"amount_cents": {"500"}, "payment_ref": {"q"}})
	if err != nil {
		t.Fatal(err)
	}
	if readAll(t, resp); resp.StatusCode != http.StatusForbidden {
		t.Errorf("csrf in query: %d", resp.StatusCode)
	}
	anon := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, p := range []string{"/console/accounts", "/console/accounts/" + id, "/console/system", "/console/bonus-grants", "/console/catalog-import"} {
		resp, err := anon.Get(svc.AdminURL + p)
		if err != nil {
			t.Fatal(err)
		}
		if body := readAll(t, resp); resp.StatusCode != http.StatusSeeOther || strings.Contains(body, id) {
			t.Errorf("anonymous %s: %d", p, resp.StatusCode)
		}
	}
	if got := balanceViaAdmin(t, svc, id); got != before {
		t.Errorf("balance moved from %d to %d", before, got)
	}

	// Sign-out ends the session; the old cookie no longer works.
	var old *http.Cookie
	u, _ := url.Parse(svc.AdminURL + "/console/")
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == "kyapi_console" {
			old = ck
		}
	}
	resp, err = c.PostForm(svc.AdminURL+"/console/sign-out", url.Values{"csrf": {csrf}})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	req, _ := http.NewRequest(http.MethodGet, svc.AdminURL+"/console/accounts", nil)
	req.AddCookie(old)
	resp, err = anon.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if readAll(t, resp); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("old session after sign-out: %d", resp.StatusCode)
	}
}

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	s := ""
	for n > 0 {
		s = string(rune('0'+n%10)) + s
		n /= 10
	}
	return s
}
