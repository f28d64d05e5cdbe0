package console_test

import (
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kyapi/kyapi/console"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// signIn posts the sign-in form with the given token and returns the last response.
func signIn(t *testing.T, c *http.Client, base, token string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(base + "/console/sign-in")
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no csrf field on the sign-in form: %s", body)
	}
	resp, err = c.PostForm(base+"/console/sign-in", url.Values{"csrf": {m[1]}, "token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	return resp, readAll(t, resp)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

func newClient(t *testing.T, srv *httptest.Server) *http.Client {
	jar, _ := cookiejar.New(nil)
	c := srv.Client()
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

func TestSessionCookieIsHttpOnlyStrictSecureUnderTLSAndExpires(t *testing.T) {
	clk := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	s := &console.Server{Token: "the-token", Clock: clk.now, SessionTTL: time.Hour}
	srv := httptest.NewTLSServer(s.Handler())
	defer srv.Close()
	c := newClient(t, srv)

	resp, _ := signIn(t, c, srv.URL, "the-token")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/accounts" {
		t.Fatalf("sign-in: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var sess *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "kyapi_console" && ck.Value != "" {
			sess = ck
		}
	}
	if sess == nil || !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode || !sess.Secure || sess.MaxAge != 3600 || sess.Path != "/console/" {
		t.Fatalf("session cookie: %+v", sess)
	}

	// Signed in, a form with the session's CSRF token works (sign-out redirects).
	resp, err := c.Get(srv.URL + "/console/sign-in") // a signed-in operator is sent on
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in page while signed in: %d", resp.StatusCode)
	}

	clk.advance(time.Hour)
	resp, err = c.PostForm(srv.URL+"/console/sign-out", url.Values{"csrf": {"whatever"}})
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "session has ended") {
		t.Fatalf("after the TTL: %d %s", resp.StatusCode, body)
	}
}

func TestAWrongTokenShowsAnErrorAndNeverTheToken(t *testing.T) {
	s := &console.Server{Token: "the-token"}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	c := newClient(t, srv)
	resp, body := signIn(t, c, srv.URL, "guess-<b>secret</b>-guess")
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "That is not the admin token.") {
		t.Fatalf("wrong token: %d %s", resp.StatusCode, body)
	}
	if strings.Contains(body, "guess") || strings.Contains(body, "the-token") {
		t.Fatal("the page repeats a token")
	}
	for _, ck := range resp.Cookies() {
		if ck.Name == "kyapi_console" && ck.Value != "" {
			t.Fatal("a wrong token got a session")
		}
	}
	// A sign-in posted without the sign-in form's CSRF token is refused even with the right token.
	resp, err := c.PostForm(srv.URL+"/console/sign-in", url.Values{"token": {"the-token"}})
	if err != nil {
		t.Fatal(err)
	}
	if readAll(t, resp); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("sign-in without CSRF: %d", resp.StatusCode)
	}
}

func TestNoTokenConfiguredMeansNobodySignsIn(t *testing.T) {
	srv := httptest.NewServer((&console.Server{}).Handler())
	defer srv.Close()
	if resp, _ := signIn(t, newClient(t, srv), srv.URL, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("empty token: %d", resp.StatusCode)
	}
}

// The admin listener is plain HTTP: the console is under TLS only behind a proxy that ends it.
// A session cookie sent there without Secure would go out again over plain HTTP (the same host
// reached by http://), where anyone on the path can take it and act as the admin. The proxy
// says the request came over HTTPS (X-Forwarded-Proto), and the cookie is then Secure; a
// direct request over plain HTTP still gets a cookie it can send back.
func TestTheSessionCookieIsSecureBehindAnHTTPSProxy(t *testing.T) {
	s := &console.Server{Token: "the-token"}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for proto, secure := range map[string]bool{"https": true, "": false, "http": false} {
		c := newClient(t, srv)
		resp, err := c.Get(srv.URL + "/console/sign-in")
		if err != nil {
			t.Fatal(err)
		}
		m := csrfField.FindStringSubmatch(readAll(t, resp))
		if m == nil {
			t.Fatal("no csrf field on the sign-in form")
		}
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/console/sign-in", strings.NewReader(url.Values{"csrf": {m[1]}, "token": {"the-token"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if proto != "" {
			req.Header.Set("X-Forwarded-Proto", proto)
		}
		resp, err = c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		var sess *http.Cookie
		for _, ck := range resp.Cookies() {
			if ck.Name == "kyapi_console" && ck.Value != "" {
				sess = ck
			}
		}
		if resp.StatusCode != http.StatusSeeOther || sess == nil || sess.Secure != secure {
			t.Errorf("sign-in with X-Forwarded-Proto %q: %d, session cookie %+v; want Secure %v", proto, resp.StatusCode, sess, secure)
		}
	}
}
