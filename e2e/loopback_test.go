package e2e

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/internal/pgtest"
)

// listeningLines are the process's `listening` log lines, by api.
func listeningLines(out string) map[string]string {
	addrs := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var line struct {
			Msg  string `json:"msg"`
			API  string `json:"api"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "listening" {
			addrs[line.API] = line.Addr
		}
	}
	return addrs
}

// adminNotStarted begins the warning of a serve whose default admin address is taken.
const adminNotStarted = "admin API not started: its default address is taken"

// Two serve processes on one machine sharing one database, neither given ADMIN_ADDR (as
// decisions.md lets several share a database): the second finds the default admin address
// taken, says so, and serves the read API rather than exiting.
func TestASecondServeWhoseDefaultAdminAddressIsTakenServesTheReadAPI(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	token := randomToken("admin-")
	a := launchServe(t, serveConfig{Name: "A", DatabaseURL: dbURL, AdminToken: token, NoAdminAddr: true})
	a.waitReady() // A has the default address, or it was taken already and A said so
	b := launchServe(t, serveConfig{Name: "B", DatabaseURL: dbURL, AdminToken: token, NoAdminAddr: true})
	b.waitReady()
	// The two cannot both hold it: at least one found it taken (both, when something else on
	// the machine holds it; A alone, when that let it go before B started), and serves.
	warned := 0
	for _, p := range []*service{a, b} {
		if out := p.Output(); strings.Contains(out, adminNotStarted) {
			if !strings.Contains(out, "127.0.0.1:8081") {
				t.Errorf("%s does not name the address it found taken:\n%s", p.cfg.Name, out)
			}
			if r := p.read("/api/data/towns", "svc_live_nosuchkey"); r.Status != http.StatusUnauthorized {
				t.Errorf("%s's read API: %d %s, want 401 for an unknown key", p.cfg.Name, r.Status, r.Body)
			}
			warned++
		}
	}
	if warned == 0 {
		t.Fatalf("neither process said the default admin address was taken:\nA:\n%s\nB:\n%s", a.Output(), b.Output())
	}
}

func TestTheAdminAPIListensOnLoopbackByDefault(t *testing.T) {
	t.Parallel()
	const defaultAdmin = "127.0.0.1:8081"
	dbURL := pgtest.NewDatabase(t)
	s := launchServe(t, serveConfig{Name: "defaults", DatabaseURL: dbURL, NoAdminAddr: true})

	// Wait for the admin API's listening line, or for the line saying the default address is
	// taken (8081 held by something else on this machine: serve then goes on without it).
	deadline := time.Now().Add(readyWait)
	for listeningLines(s.Output())["admin"] == "" && !strings.Contains(s.Output(), adminNotStarted) && !s.exited() {
		if time.Now().After(deadline) {
			t.Fatalf("no admin listening line within %v:\n%s", readyWait, s.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.waitReady()
	if out := s.Output(); strings.Contains(out, adminNotStarted) {
		if !strings.Contains(out, defaultAdmin) {
			t.Fatalf("serve went on without the admin API but does not name the address it tried, %s:\n%s", defaultAdmin, out)
		}
		t.Logf("port 8081 is taken on this machine; serve tried %s as the log shows:\n%s", defaultAdmin, out)
		return
	}

	if got := listeningLines(s.Output())["admin"]; got != defaultAdmin {
		t.Fatalf("admin API listens on %q, want %s", got, defaultAdmin)
	}
	// It is the admin API that answers there: without a token, a 401 error body.
	r, err := do(&http.Client{Timeout: clientTimeout}, mustRequest(t, "http://"+defaultAdmin+"/admin/accounts/nobody"))
	if err != nil {
		t.Fatalf("GET on the default admin address: %v", err)
	}
	if r.Status != http.StatusUnauthorized || r.errorCode() == "" {
		t.Errorf("admin API on %s without a token: status %d, body %s; want 401 with an error body", defaultAdmin, r.Status, r.Body)
	}
	// And it is not reachable on the machine's other addresses.
	for _, ip := range nonLoopbackIPv4(t) {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "8081"), 5*time.Second)
		if err == nil {
			conn.Close()
			t.Errorf("port 8081 accepts connections on %s, not only on loopback", ip)
		}
	}
}

func mustRequest(t *testing.T, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func nonLoopbackIPv4(t *testing.T) []string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Logf("cannot list interface addresses: %v", err)
		return nil
	}
	var ips []string
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			ips = append(ips, n.IP.String())
		}
	}
	return ips
}
