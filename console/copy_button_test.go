package console_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/kyapi/kyapi/internal/apptest"
)

// The admin listener, and so the console, may be reached over plain HTTP by a host name on a
// private network (docs/operations.md). Such a page is not a secure context: the browser gives
// it no clipboard, so a Copy button there could copy nothing while the key is shown this once.
// The button is offered only where it can copy; the key is shown either way, to select by hand.
func TestTheCopyButtonIsOfferedOnlyWhereItCanCopy(t *testing.T) {
	svc := apptest.Start(t, 60)
	account := openAccount(t, svc, "Copy Co", "copy@example.com")
	u, err := url.Parse(svc.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := browser(t, chromedp.Flag("host-resolver-rules", "MAP kyapi-admin.internal 127.0.0.1"))
	p := &page{t: t, ctx: ctx, base: "http://kyapi-admin.internal:" + u.Port(), dir: t.TempDir()}

	p.open("/console/sign-in", "#sign-in")
	p.run(chromedp.SendKeys(chromedp.CSS("#token"), apptest.AdminToken))
	p.submit("#sign-in button", "#q")
	p.open("/console/accounts/"+account, "#issue-key")
	p.submit("#issue-key", "#api-key")
	if key := p.text("#api-key"); !strings.HasPrefix(key, "svc_live_") {
		t.Fatalf("issued key: %q", key)
	}
	if p.eval(`window.isSecureContext || typeof navigator.clipboard !== "undefined"`) {
		t.Fatal("the page is a secure context with a clipboard: the test does not test what it says")
	}
	if !p.eval(`document.querySelector("button.copy").hidden`) {
		t.Fatal("the Copy button is offered on a page that has no clipboard to copy to")
	}
}
