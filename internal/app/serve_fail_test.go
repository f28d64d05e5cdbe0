package app_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/internal/app"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/internal/redistest"
	"github.com/kyapi/kyapi/internal/syncbuf"
)

// A serve that cannot listen (its admin port in use) ends with that error, and the work it
// had started in the background (resuming grants, the maintenance loop) does not report the
// pool closed under it as failures of its own.
func TestAServeThatCannotListenReportsOnlyThat(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := app.Config{DatabaseURL: pgtest.NewDatabase(t), ReadAddr: "127.0.0.1:0", AdminAddr: busy.Addr().String(),
		AdminToken: "admin-token", DataDir: t.TempDir(), CanonicalBaseURL: "http://localhost:8080", RateLimit: 60}
	var out syncbuf.Buffer
	log := logrus.New()
	log.SetOutput(&out)
	log.SetFormatter(&logrus.JSONFormatter{})
	err = app.Serve(context.Background(), cfg, log, app.Options{Read: true, Admin: true, Projections: true})
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("serve with its admin port in use: %v", err)
	}
	time.Sleep(time.Second) // what the background work would log once the pool is closed
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, `"level":"error"`) || strings.Contains(line, `"level":"warning"`) {
			t.Errorf("logged besides the error it returned: %s", line)
		}
	}
}

// An AUDIT_SIGNING_KEY file that cannot be read stops serve before it catches its projections
// up (minutes on a large store), not after.
func TestAnUnreadableSigningKeyStopsServeBeforeItsCatchUp(t *testing.T) {
	cfg := app.Config{DatabaseURL: pgtest.NewDatabase(t), ReadAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
		AdminToken: "admin-token", DataDir: t.TempDir(), CanonicalBaseURL: "http://localhost:8080", RateLimit: 60,
		AuditSigningKey: t.TempDir() + "/no-such.key"}
	var out syncbuf.Buffer
	log := logrus.New()
	log.SetOutput(&out)
	log.SetFormatter(&logrus.JSONFormatter{})
	err := app.Serve(context.Background(), cfg, log, app.Options{Read: true, Admin: true, Projections: true})
	if err == nil || !strings.Contains(err.Error(), "AUDIT_SIGNING_KEY") {
		t.Fatalf("serve with an unreadable signing key: %v", err)
	}
	if strings.Contains(out.String(), "projections ready") {
		t.Errorf("caught its projections up before reading the key:\n%s", out.String())
	}
}

// A serve whose read port is in use, after its admin API opened, ends with that error and
// leaves nothing listening: the admin API of a process that failed to start is closed.
func TestAServeWhoseReadPortIsInUseClosesItsAdminAPI(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := app.Config{DatabaseURL: pgtest.NewDatabase(t), ReadAddr: busy.Addr().String(), AdminAddr: "127.0.0.1:0",
		AdminToken: "admin-token", DataDir: t.TempDir(), CanonicalBaseURL: "http://localhost:8080", RateLimit: 60}
	log := logrus.New()
	log.SetOutput(io.Discard)
	var adminAddr string
	err = app.Serve(context.Background(), cfg, log, app.Options{Read: true, Admin: true, Projections: true,
		Listening: func(api, addr string) {
			if api == "admin" {
				adminAddr = addr
			}
		}})
	if err == nil || !strings.Contains(err.Error(), "read API") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("serve with its read port in use: %v", err)
	}
	if adminAddr == "" {
		t.Fatal("the admin API never listened: nothing was tested")
	}
	if c, err := net.Dial("tcp", adminAddr); err == nil {
		c.Close()
		t.Fatalf("the admin API at %s still takes connections after serve returned", adminAddr)
	}
}

// A serve that fails to start answers nothing: its admin API must not take calls while the
// read API is still to be opened and then fail (its port in use), or a call in flight then —
// a purchase, a grant — is cut off unanswered, committed or not, by a process that exits 1.
// Here the rate limiter's Redis is slow to answer between the two (CLIENT PAUSE), so that an
// admin API served before the read API listened has seconds to answer.
func TestAServeThatFailsToStartNeverAnsweredAnAdminCall(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	redis := redistest.Start(t)
	cfg := app.Config{DatabaseURL: pgtest.NewDatabase(t), ReadAddr: busy.Addr().String(), AdminAddr: "127.0.0.1:0",
		AdminToken: "admin-token", DataDir: t.TempDir(), CanonicalBaseURL: "http://localhost:8080", RateLimit: 60,
		RedisURL: redis.URL(), RedisTimeout: 3 * time.Second}
	var logs syncbuf.Buffer
	log := logrus.New()
	log.SetOutput(&logs)
	log.SetFormatter(&logrus.JSONFormatter{})
	answered := make(chan string, 1)
	err = app.Serve(context.Background(), cfg, log, app.Options{Read: true, Admin: true, Projections: true,
		Listening: func(api, addr string) {
			if api != "admin" {
				return
			}
			if err := redis.Client().Do(context.Background(), "CLIENT", "PAUSE", "3000", "ALL").Err(); err != nil {
				t.Error(err)
			}
			go func() {
				req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/admin/accounts/acc_nobody", nil)
				req.Header.Set("Authorization", "Bearer admin-token")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					answered <- ""
					return
				}
				resp.Body.Close()
				answered <- resp.Status
			}()
		}})
	if err == nil || !strings.Contains(err.Error(), "read API") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("serve with its read port in use: %v", err)
	}
	if status := <-answered; status != "" {
		t.Errorf("the admin API answered %s, then serve failed to start", status)
	}
	// Nor does its log say it listened, or give the console's address: it served neither.
	if out := logs.String(); strings.Contains(out, `"msg":"listening"`) || strings.Contains(out, `"msg":"console"`) {
		t.Errorf("a serve that failed to start logged that it listened:\n%s", out)
	}
}
