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

func TestTheAdminAPIListensOnLoopbackByDefault(t *testing.T) {
	t.Parallel()
	const defaultAdmin = "127.0.0.1:8081"
	dbURL := pgtest.NewDatabase(t)
	s := launchServe(t, serveConfig{Name: "defaults", DatabaseURL: dbURL, NoAdminAddr: true})

	// Wait for the admin API's listening line, or for the process to end (8081 taken by
	// something else on this machine: serve then exits naming the address it tried).
	deadline := time.Now().Add(readyWait)
	for listeningLines(s.Output())["admin"] == "" && !s.exited() {
		if time.Now().After(deadline) {
			t.Fatalf("no admin listening line within %v:\n%s", readyWait, s.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s.exited() {
		out := s.Output()
		if !strings.Contains(out, "admin API: listen tcp "+defaultAdmin) {
			t.Fatalf("serve exited without listening on the default admin address %s:\n%s", defaultAdmin, out)
		}
		t.Logf("port 8081 is taken on this machine; serve tried %s as the log shows:\n%s", defaultAdmin, out)
		return
	}
	s.waitReady()

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
