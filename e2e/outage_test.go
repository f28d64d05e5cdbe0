package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// privateCluster is a PostgreSQL cluster of one test, which it may stop and start.
type privateCluster struct {
	t    testing.TB
	bin  string
	dir  string // data directory
	sock string // unix socket directory
	port int
}

// startPrivateCluster initialises and starts a cluster in t.TempDir() from the system
// binaries under /usr/lib/postgresql/*/bin (as root, through runuser -u postgres).
func startPrivateCluster(t testing.TB) *privateCluster {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	if len(bins) == 0 {
		t.Fatal("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
	}
	sort.Slice(bins, func(i, j int) bool { return versionOf(bins[i]) < versionOf(bins[j]) })
	base := t.TempDir()
	// t.TempDir's parent is private to this user; the postgres user must reach base.
	if err := os.Chmod(filepath.Dir(base), 0o755); err != nil {
		t.Fatal(err)
	}
	_, portStr, _ := net.SplitHostPort(freeAddr(t))
	port, _ := strconv.Atoi(portStr)
	c := &privateCluster{t: t, bin: bins[len(bins)-1], dir: filepath.Join(base, "data"), sock: base, port: port}
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root needs a postgres user for initdb: %v", err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		if err := os.Chown(base, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	c.run("initdb", "-D", c.dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8")
	c.start()
	t.Cleanup(func() {
		if c.running() {
			_, _ = c.pgCtl("stop", "-m", "immediate")
		}
	})
	return c
}

func versionOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// command runs a server binary, as the postgres user when the test runs as root.
func (c *privateCluster) command(name string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, name)
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

func (c *privateCluster) run(name string, args ...string) {
	c.t.Helper()
	if out, err := c.command(name, args...).CombinedOutput(); err != nil {
		c.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func (c *privateCluster) pgCtl(args ...string) (string, error) {
	out, err := c.command("pg_ctl", append([]string{"-D", c.dir}, args...)...).CombinedOutput()
	return string(out), err
}

func (c *privateCluster) start() {
	c.t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", c.port, c.sock)
	if out, err := c.pgCtl("-l", filepath.Join(c.sock, "postgres.log"), "-o", opts, "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.sock, "postgres.log"))
		c.t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
}

func (c *privateCluster) stop() {
	c.t.Helper()
	if out, err := c.pgCtl("stop", "-m", "fast", "-w", "-t", "60"); err != nil {
		c.t.Fatalf("pg_ctl stop: %v\n%s", err, out)
	}
}

func (c *privateCluster) running() bool {
	_, err := c.pgCtl("status")
	return err == nil
}

// createDatabase creates a database and returns its URL.
func (c *privateCluster) createDatabase(name string) string {
	c.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.url("postgres"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		c.t.Fatal(err)
	}
	return c.url(name)
}

func (c *privateCluster) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

func TestDatabaseOutageGives503AndRecovers(t *testing.T) {
	t.Parallel()
	cluster := startPrivateCluster(t)
	dbURL := cluster.createDatabase("kyapi")
	places := importCatalog(t, dbURL)
	s := startServe(t, serveConfig{Name: "outage", DatabaseURL: dbURL, AdminToken: randomToken("admin-")})
	accountID, key := s.openAccount("Outage", 500)

	for _, p := range places[:5] {
		s.readOK("/api/data/places/"+p.ID, key.APIKey)
	}
	s.readOK("/api/data/places?town=louisville&limit=5", key.APIKey)

	cluster.stop()

	// During the outage: 503 with the error body, never an uncharged 200, never a hang
	// (the client's timeout is well above the server's own limits).
	paths := []string{
		"/api/data/places/" + places[10].ID,
		"/api/data/places/" + places[11].ID,
		"/api/data/places?town=lexington&limit=5",
		"/api/data/search?lat=38.25&lng=-85.76&radius=5&limit=5",
		"/api/data/towns",
		"/api/data/places/" + places[0].ID, // paid before the outage
	}
	seen := map[string]int{}
	for _, p := range paths {
		r, err := s.tryRead(p, key.APIKey)
		if err != nil {
			t.Errorf("GET %s during the outage: no answer: %v", p, err)
			continue
		}
		seen[fmt.Sprintf("%d %s", r.Status, r.errorCode())]++
		switch {
		case r.Status == http.StatusOK:
			t.Errorf("GET %s during the outage answered 200: %s", p, r.Body)
		case r.Status != http.StatusServiceUnavailable || r.errorCode()+outcomeOf(r) != "internal, charge outcome none":
			t.Errorf("GET %s during the outage: status %d code %q%s, want 503 internal, nothing charged: %s", p, r.Status, r.errorCode(), outcomeOf(r), r.Body)
		}
	}
	r := s.adminAs(s.cfg.AdminToken, http.MethodGet, "/admin/accounts/"+accountID, nil)
	seen[fmt.Sprintf("admin %d %s", r.Status, r.errorCode())]++
	if r.Status != http.StatusServiceUnavailable || r.errorCode() != "internal" {
		t.Errorf("admin GET account during the outage: status %d code %q, want 503 internal: %s", r.Status, r.errorCode(), r.Body)
	}
	t.Logf("answers during the outage (status code: count): %v", seen)

	cluster.start()

	// The service resumes by itself.
	var after metered
	eventually(t, recoveryWait, "a metered request succeeds after PostgreSQL is back", func() error {
		r, err := s.tryRead("/api/data/places/"+places[12].ID, key.APIKey)
		if err != nil {
			return err
		}
		if r.Status != http.StatusOK {
			return fmt.Errorf("status %d: %s", r.Status, r.Body)
		}
		r.decode(t, &after)
		return nil
	})
	list := s.readOK("/api/data/places?town=lexington&limit=5", key.APIKey)

	// Nothing charged twice, nothing lost.
	pool := openPool(t, dbURL)
	balance, sum := ledgerTotals(t, pool, accountID)
	if balance != sum || balance != list.Meta.CreditsRemaining {
		t.Errorf("accounts.balance %d, sum of credits_delta %d, last credits_remaining %d: want all equal", balance, sum, list.Meta.CreditsRemaining)
	}
	requireNothingPaidTwice(t, pool, accountID)
	requireAuditClean(t, dbURL)
	s.requireLedgerCaughtUp(accountID, balance)
}
