package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/kyapi/kyapi/internal/apptest"
)

// browser starts a headless Chromium (the Debian package) for the test. There is no skip: a
// machine without Chromium fails here (.ci/run installs it).
func browser(t *testing.T, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("Chromium is not installed (apt-get install chromium); the console's browser tests need it")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 900),
	)
	opts = append(opts, extra...)
	// A generous deadline only so that a stuck browser cannot hang the suite.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(ctx)
	t.Cleanup(cancelTab)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return ctx
}

// screenshotDir is where the tests write a screenshot of each page: CONSOLE_SCREENSHOTS when
// set (to refresh docs/console/), otherwise a temporary folder.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("CONSOLE_SCREENSHOTS"); d != "" {
		return d
	}
	return t.TempDir()
}

type page struct {
	t    *testing.T
	ctx  context.Context
	base string
	dir  string
}

func (p *page) run(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, steps...); err != nil {
		p.t.Fatal(err)
	}
}

func get[T any](p *page, a chromedp.Action[T]) T {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, a)
	if err != nil {
		p.t.Fatal(err)
	}
	return v
}

func (p *page) text(sel string) string {
	p.t.Helper()
	return strings.TrimSpace(get(p, chromedp.Text(chromedp.CSS(sel))))
}

func (p *page) html() string {
	p.t.Helper()
	return get(p, chromedp.OuterHTML(chromedp.CSS("html")))
}

// eval runs a script that ends in a boolean expression.
func (p *page) eval(script string) bool {
	p.t.Helper()
	return get(p, chromedp.Evaluate[bool](script))
}

func (p *page) shot(name string) {
	p.t.Helper()
	png := get(p, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(p.dir, name+".png"), png, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

func (p *page) open(path, waitFor string) {
	p.t.Helper()
	p.run(chromedp.Navigate(p.base+path), chromedp.WaitVisible(chromedp.CSS(waitFor)))
	p.settled()
}

// submit clicks a button and waits for an element of the page it leads to.
func (p *page) submit(button, waitFor string) {
	p.t.Helper()
	p.run(chromedp.Click(chromedp.CSS(button)), chromedp.WaitVisible(chromedp.CSS(waitFor)))
	p.settled()
}

// settled waits until the page has finished loading, so that the next step's node lookups
// are not made stale by the rest of the document arriving.
func (p *page) settled() {
	p.t.Helper()
	for deadline := time.Now().Add(time.Minute); !p.eval(`document.readyState === "complete"`); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			p.t.Fatal("the page did not finish loading")
		}
	}
}

func mustContain(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Fatalf("%s: %q does not contain %q", what, got, w)
		}
	}
}

// TestConsoleInARealBrowser walks the console as an operator does, in Chromium, against the
// whole service (internal/app.Serve): sign in, find an account, issue a key and see it once,
// rotate and revoke, record a purchase, import a file with a bad line, grant a bonus, read
// the System page, have a form without its CSRF token refused, and sign out.
func TestConsoleInARealBrowser(t *testing.T) {
	svc := apptest.Start(t, 1000)
	status, body := svc.Admin(t, http.MethodPost, "/admin/catalog/import",
		`{"record":"town","slug":"berea","name":"Berea"}`+"\n"+`{"record":"place","place_id":"plc_a","name":"Boone Tavern","category":"food","town_slug":"berea"}`)
	if status != http.StatusOK {
		t.Fatalf("import: %d %s", status, body)
	}
	ada := openAccount(t, svc, "Ada Lovelace", "ada@example.com")
	bob := openAccount(t, svc, "Bob Carver", "bob@carver.example")
	adaKey := issueKey(t, svc, ada)
	if st, b := svc.Admin(t, http.MethodPost, "/admin/accounts/"+ada+"/purchases", `{"amount_cents":500,"payment_ref":"seed-ada"}`); st != http.StatusCreated {
		t.Fatalf("purchase: %d %s", st, b)
	}
	waitFor(t, func() bool { st, _ := svc.Read(t, "/api/data/places/plc_a", adaKey); return st == http.StatusOK })
	svc.Read(t, "/api/data/towns", adaKey)

	p := &page{t: t, ctx: browser(t), base: svc.AdminURL, dir: screenshotDir(t)}
	// Each step runs as a subtest whose t the page helpers report to; a failed step stops the walk.
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, func(t *testing.T) { p.t = t; f(t) }) {
			t.FailNow()
		}
	}

	step("an operator signs in with the admin token; a wrong one is refused", func(t *testing.T) {
		p.open("/console/", "#sign-in")
		p.shot("sign-in")
		p.run(chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token"))
		p.submit("#sign-in button", "#error")
		mustContain(t, "error", p.text("#error"), "That is not the admin token.")
		if strings.Contains(p.html(), "not-the-token") {
			t.Fatal("the page shows the wrong token")
		}
		p.run(chromedp.SendKeys(chromedp.CSS("#token"), apptest.AdminToken))
		p.submit("#sign-in button", "#q")
		res, err := chromedp.Call(p.ctx, network.GetCookies, network.GetCookiesParams{})
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, c := range res.Cookies {
			if c.Name == "kyapi_console" {
				found = true
				if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict || c.Expires <= 0 {
					t.Fatalf("session cookie: %+v", c)
				}
			}
		}
		if !found {
			t.Fatal("no session cookie")
		}
	})

	step("accounts are found by name or e-mail with balance, keys and 7-day spend", func(t *testing.T) {
		p.open("/console/accounts?q=LOVELACE", "#accounts")
		table := p.text("#accounts")
		mustContain(t, "search by name", table, "Ada Lovelace", "ada@example.com", "…"+adaKey[len(adaKey)-4:])
		if strings.Contains(table, "Bob") {
			t.Fatal("a search for Lovelace shows Bob")
		}
		p.open("/console/accounts?q=carver.example", "#accounts")
		mustContain(t, "search by e-mail", p.text("#accounts"), "Bob Carver")
		// Spent in 7 days comes from a projection: wait for the charge to reach it.
		deadline := time.Now().Add(time.Minute)
		for {
			p.open("/console/accounts", "#accounts")
			row := p.text("#accounts tbody tr:last-child")
			if strings.Contains(row, "Ada") && !strings.HasSuffix(row, "\t0") && !strings.HasSuffix(row, " 0") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Ada's spend never shows: %q", row)
			}
			time.Sleep(200 * time.Millisecond)
		}
		p.shot("accounts")
		p.run(chromedp.Click(chromedp.CSS(`a[href="/console/accounts/`+ada+`"]`)), chromedp.WaitVisible(chromedp.CSS("#balance")))
		mustContain(t, "account page", p.text("h1"), "Ada Lovelace")
		svg := get(p, chromedp.OuterHTML(chromedp.CSS("#spend-chart svg")))
		mustContain(t, "spend chart", svg, "places.detail", "<rect")
		p.shot("account")
	})

	var firstKey string
	step("an issued key is shown once, with a copy button, and never again", func(t *testing.T) {
		p.open("/console/accounts/"+bob, "#issue-key")
		p.submit("#issue-key", "#api-key")
		firstKey = p.text("#api-key")
		if !strings.HasPrefix(firstKey, "kyapi_") && len(firstKey) < 20 {
			t.Fatalf("issued key looks wrong: %q", firstKey)
		}
		if p.eval(`document.querySelector("button.copy").hidden`) {
			t.Fatal("the copy button is hidden")
		}
		p.shot("key-issued")
		if st, b := svc.Read(t, "/api/data/towns", firstKey); st == http.StatusUnauthorized || st == http.StatusForbidden {
			t.Fatalf("the shown key does not work: %d %s", st, b)
		}
		p.run(chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#key-gone")))
		if strings.Contains(p.html(), firstKey) {
			t.Fatal("the key is shown a second time")
		}
		p.open("/console/accounts/"+bob, "#keys")
		if strings.Contains(p.html(), firstKey) {
			t.Fatal("the account page shows the full key")
		}
		mustContain(t, "keys", p.text("#keys"), firstKey[len(firstKey)-4:], "active")
	})

	step("rotating puts the old key in grace; revoking after confirmation stops it", func(t *testing.T) {
		p.open("/console/accounts/"+bob, "#rotate-key")
		p.submit("#rotate-key", "#api-key")
		second := p.text("#api-key")
		if second == firstKey {
			t.Fatal("rotation showed the same key")
		}
		p.open("/console/accounts/"+bob, "#keys")
		keys := p.text("#keys")
		mustContain(t, "after rotation", keys, "grace", "active")
		// Rotating again would revoke the key in grace at once: the form says so.
		mustContain(t, "rotate warning", p.text("#rotate-revokes"), "…"+firstKey[len(firstKey)-4:], "stops at once")
		revokePage := get(p, chromedp.Evaluate[string](`document.querySelector("#keys tbody tr:first-child a.danger").getAttribute("href")`))
		p.run(chromedp.Click(chromedp.CSS(`#keys tbody tr:first-child a.danger`)), chromedp.WaitVisible(chromedp.CSS("#confirm-revoke")))
		mustContain(t, "confirmation", p.text("#revoke"), firstKey[len(firstKey)-4:], "cannot be restored")
		p.shot("revoke-confirm")
		p.submit("#confirm-revoke", "#keys")
		mustContain(t, "after revoke", p.text("#keys tbody tr:first-child"), "revoked")
		// The confirmation asked for again: the key is shown revoked, with nothing to confirm.
		p.open(revokePage, "#revoked")
		if strings.Contains(p.html(), `id="confirm-revoke"`) {
			t.Fatal("the revoke page of a revoked key offers to revoke it")
		}
		mustContain(t, "revoked key's page", p.text("#revoked"), "already revoked")
		if st, _ := svc.Read(t, "/api/data/towns", firstKey); st != http.StatusForbidden {
			t.Fatalf("the revoked key answers %d, want 403", st)
		}
	})

	step("a purchase shows dollars to credits first, needs a reference, then moves balance and ledger", func(t *testing.T) {
		p.open("/console/accounts/"+bob, "#purchase")
		// Without its reference (the browser's own check removed), the server refuses it.
		p.eval(`document.getElementById("payment_ref").removeAttribute("required"); true`)
		p.run(chromedp.SendKeys(chromedp.CSS("#dollars"), "12.50"))
		p.submit("#review-purchase", "#error")
		mustContain(t, "no reference", p.text("#error"), "payment_ref")
		mustContain(t, "balance unchanged", p.text("#balance"), "0")
		p.run(chromedp.SendKeys(chromedp.CSS("#payment_ref"), "stripe-pi-123"))
		p.submit("#review-purchase", "#credits-preview")
		mustContain(t, "preview", p.text("#credits-preview"), "$12.50", "2,500 credits")
		p.shot("purchase-confirm")
		p.submit("#confirm-purchase", "#balance")
		if got := p.text("#balance"); got != "2,500" {
			t.Fatalf("balance after purchase: %q", got)
		}
		mustContain(t, "ledger", p.text("#ledger"), "CreditsPurchased", "+2,500")
	})

	step("an import with a bad line shows the line and applies nothing", func(t *testing.T) {
		dir := t.TempDir()
		bad := filepath.Join(dir, "bad.ndjson")
		good := filepath.Join(dir, "good.ndjson")
		os.WriteFile(bad, []byte(`{"record":"town","slug":"paducah","name":"Paducah"}`+"\n"+`{"record":"place","place_id":"plc_b","name":7}`+"\n"), 0o644)
		os.WriteFile(good, []byte(`{"record":"town","slug":"paducah","name":"Paducah"}`+"\n"), 0o644)
		p.open("/console/catalog-import", "#file")
		p.run(chromedp.SetUploadFiles(chromedp.CSS("#file"), []string{bad}))
		p.submit("#import-submit", "#error")
		mustContain(t, "import error", p.text("#error"), "nothing was imported")
		mustContain(t, "line", p.text("#import-line"), "Line 2")
		p.shot("import-error")
		_, towns := svc.Read(t, "/api/data/towns", adaKey)
		if strings.Contains(towns, "paducah") {
			t.Fatal("the bad file's good line was applied")
		}
		// A fresh page for the good file: node ids resolved on the error page while it was
		// still settling went stale now and then ("No node with given id found").
		p.open("/console/catalog-import", "#file")
		p.run(chromedp.SetUploadFiles(chromedp.CSS("#file"), []string{good}))
		p.submit("#import-submit", "#import-result")
		mustContain(t, "import result", p.text("#import-result"), "1 towns")
	})

	step("a bonus grant shows how many accounts it reaches before it is made", func(t *testing.T) {
		p.open("/console/bonus-grants", "#bonus")
		p.run(chromedp.SendKeys(chromedp.CSS("#outage_id"), "2026-03-01-db"), chromedp.SendKeys(chromedp.CSS("#bonus_credits"), "50"))
		p.submit("#review-bonus", "#bonus-reach")
		mustContain(t, "reach", p.text("#bonus-reach"), "2 accounts")
		p.shot("bonus-confirm")
		p.submit("#confirm-bonus", "#grant-result")
		mustContain(t, "grant", p.text("#grant-result"), "2026-03-01-db", "50 credits to 2 accounts")
		p.shot("bonus-grants")
	})

	step("the System page shows the database, the head and each projection's lag", func(t *testing.T) {
		p.open("/console/system", "#projections")
		if got := p.text("#db-state"); got != "reachable" {
			t.Fatalf("database: %q", got)
		}
		mustContain(t, "projections", p.text("#projections"), "balances", "account_days", "usage", "catalog", "placeindex")
		if p.text("#head") == "0" {
			t.Fatal("the head is 0 after events")
		}
		p.shot("system")
	})

	step("a form posted without its CSRF token is refused and changes nothing", func(t *testing.T) {
		p.open("/console/accounts/"+bob, "#rotate-key")
		before := strings.Count(p.text("#keys"), "kyapi")
		p.eval(`document.querySelector("#rotate-key").form.querySelector("input[name=csrf]").remove(); true`)
		p.submit("#rotate-key", "#error")
		mustContain(t, "refusal", p.text("#error"), "security token")
		p.open("/console/accounts/"+bob, "#keys")
		if after := strings.Count(p.text("#keys"), "kyapi"); after != before {
			t.Fatalf("keys went from %d to %d", before, after)
		}
	})

	step("signing out ends the session", func(t *testing.T) {
		p.open("/console/accounts", "#sign-out")
		p.submit("#sign-out", "#sign-in")
		p.open("/console/accounts", "#sign-in")
	})
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatal("condition never held")
}

func openAccount(t *testing.T, svc *apptest.Service, name, email string) string {
	t.Helper()
	var out struct {
		Data struct {
			AccountID string `json:"account_id"`
		} `json:"data"`
	}
	_, body := svc.Admin(t, http.MethodPost, "/admin/accounts", `{"name":"`+name+`","email":"`+email+`"}`)
	if err := json.Unmarshal([]byte(body), &out); err != nil || out.Data.AccountID == "" {
		t.Fatalf("open account: %s", body)
	}
	return out.Data.AccountID
}

func issueKey(t *testing.T, svc *apptest.Service, account string) string {
	t.Helper()
	var out struct {
		Data struct {
			APIKey string `json:"api_key"`
		} `json:"data"`
	}
	_, body := svc.Admin(t, http.MethodPost, "/admin/accounts/"+account+"/keys", "")
	if err := json.Unmarshal([]byte(body), &out); err != nil || out.Data.APIKey == "" {
		t.Fatalf("issue key: %s", body)
	}
	return out.Data.APIKey
}
