package main

import (
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/internal/pgtest"
)

// A range audit whose bounds cannot hold an event (-to before -from, a negative position)
// audited nothing and reported a clean store with exit 0, even a tampered one: a usage
// mistake (exit 2), as rebuild's -batch 0 is.
func TestAuditRefusesARangeThatCannotHoldAnEvent(t *testing.T) {
	vars := map[string]string{"DATABASE_URL": pgtest.NewDatabase(t)}
	for _, args := range [][]string{
		{"audit", "-from", "100", "-to", "50"},
		{"audit", "-to", "-1"},
		{"audit", "-from", "-5"},
	} {
		out, code, _ := runKyapi(t, vars, 2*time.Minute, args...)
		if code != 2 || !strings.Contains(out, "-to") {
			t.Errorf("kyapi %s: exit %d, want 2 naming the flags\n%s", strings.Join(args, " "), code, out)
		}
	}
	// A count of workers no pool could use (a typo) started that many goroutines and ran the
	// process out of memory.
	for _, n := range []string{"-2", "257", "100000000"} {
		if out, code, _ := runKyapi(t, vars, 2*time.Minute, "audit", "-workers", n); code != 2 || !strings.Contains(out, "-workers must be 1 to 256") {
			t.Errorf("kyapi audit -workers %s: exit %d, want 2 naming the flag and its bounds\n%s", n, code, out)
		}
	}
	if out, code, _ := runKyapi(t, vars, 2*time.Minute, "audit", "-from", "1", "-to", "1"); code != 0 {
		t.Errorf("kyapi audit -from 1 -to 1 (one position) on a clean store: exit %d\n%s", code, out)
	}
}

// README, "Configuration": a READ_ADDR or ADMIN_ADDR that is not host:port "stops every
// command at start with a message naming it". A port out of range passed the check, and
// serve failed only after its projections had caught up, in the listener's words.
func TestAnAddressWithAnImpossiblePortStopsEveryCommandNamingIt(t *testing.T) {
	db := pgtest.NewDatabase(t)
	for _, v := range []string{"READ_ADDR", "ADMIN_ADDR"} {
		for _, bad := range []string{"127.0.0.1:99999", ":-1"} {
			out, code, _ := runKyapi(t, map[string]string{"DATABASE_URL": db, v: bad}, 2*time.Minute, "migrate")
			if code == 0 || !strings.Contains(out, v) {
				t.Errorf("%s=%s kyapi migrate: exit %d; want non-zero naming %s\n%s", v, bad, code, v, out)
			}
		}
	}
	if out, code, _ := runKyapi(t, map[string]string{"DATABASE_URL": db, "READ_ADDR": ":http", "ADMIN_ADDR": "127.0.0.1:0"}, 2*time.Minute, "migrate"); code != 0 {
		t.Errorf("a service name as READ_ADDR's port: exit %d\n%s", code, out)
	}
}

// The admin API listens on its own address, never on the public one: READ_ADDR equal to
// ADMIN_ADDR (or covering it, on every interface, or naming it otherwise: localhost) is a
// configuration mistake named as such, not "read API: ... address already in use", which
// points at another process.
func TestTheSameAddressForBothAPIsIsNamed(t *testing.T) {
	db := pgtest.NewDatabase(t)
	addr := freeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	for _, read := range []string{addr, ":" + port, "localhost:" + port} { // addr is 127.0.0.1's
		out, code, _ := runKyapi(t, map[string]string{"DATABASE_URL": db, "READ_ADDR": read, "ADMIN_ADDR": addr}, 2*time.Minute, "serve")
		if code == 0 || !strings.Contains(out, "READ_ADDR") || !strings.Contains(out, "ADMIN_ADDR") || strings.Contains(out, "already in use") {
			t.Errorf("READ_ADDR=%s ADMIN_ADDR=%s kyapi serve: exit %d, want it refused naming both\n%s", read, addr, code, out)
		}
	}
}

// Only a serve that opens both APIs is refused: a command that listens on neither, or a serve
// running one of them, may be given any pair (a read-only process on the admin port of the
// machine's default, an environment shared with one).
func TestOverlappingAddressesAreRefusedOnlyWhereBothAreOpened(t *testing.T) {
	db := pgtest.NewDatabase(t)
	if out, code, _ := runKyapi(t, map[string]string{"DATABASE_URL": db, "READ_ADDR": "127.0.0.1:8081"}, 2*time.Minute, "migrate"); code != 0 {
		t.Fatalf("READ_ADDR=127.0.0.1:8081 (ADMIN_ADDR's default) kyapi migrate: exit %d\n%s", code, out)
	}
	addr := freeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	p := startKyapi(t, map[string]string{"DATABASE_URL": db, "READ_ADDR": ":" + port, "ADMIN_ADDR": addr}, "serve", "-admin=false")
	for guard := time.Now().Add(2 * time.Minute); !healthy(addr); time.Sleep(100 * time.Millisecond) {
		if p.ended() || time.Now().After(guard) {
			t.Fatalf("serve -admin=false READ_ADDR=:%s ADMIN_ADDR=%s never served:\n%s", port, addr, p.output())
		}
	}
}
