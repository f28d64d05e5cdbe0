package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kyapi/kyapi/internal/pgtest"
)

// Each process needs its own DATA_DIR (docs/operations.md, "Processes and configuration"). A
// second process started on one that a running process holds (a copied environment; `kyapi
// rebuild` beside `make run`, both on the default ./data) stops within seconds with an error
// naming DATA_DIR, instead of waiting without end and without a word on the embedded index's
// file lock; rebuild stops before it has rebuilt any shared read model.
func TestASecondProcessOnADataDirInUseStopsWithAClearError(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	dataDir := t.TempDir()
	read1 := freeAddr(t)
	first := startKyapi(t, map[string]string{"DATABASE_URL": dbURL, "DATA_DIR": dataDir, "READ_ADDR": read1,
		"ADMIN_ADDR": freeAddr(t)}, "serve", "-admin=false")
	for end := time.Now().Add(30 * time.Second); !healthy(read1); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) || first.ended() {
			t.Fatalf("the first serve is not healthy\n%s", first.output())
		}
	}

	for _, args := range [][]string{{"serve", "-admin=false"}, {"rebuild"}} {
		read2 := freeAddr(t)
		second := startKyapi(t, map[string]string{"DATABASE_URL": dbURL, "DATA_DIR": dataDir, "READ_ADDR": read2,
			"ADMIN_ADDR": freeAddr(t)}, args...)
		for end := time.Now().Add(20 * time.Second); !second.ended() && time.Now().Before(end); {
			time.Sleep(100 * time.Millisecond)
		}
		if !second.ended() {
			_ = second.cmd.Process.Signal(syscall.SIGTERM)
			onTerm := "it ended on SIGTERM"
			select {
			case <-second.done:
			case <-time.After(5 * time.Second):
				onTerm = "it did not end within 5 s of SIGTERM either"
			}
			t.Errorf("kyapi %v on a DATA_DIR another process holds: no error after 20 s (read API listening: %v); %s\n%s",
				args, healthy(read2), onTerm, second.output())
			continue
		}
		out := second.output()
		if second.code == 0 || !strings.Contains(out, "DATA_DIR "+dataDir) || !strings.Contains(out, "another kyapi process") {
			t.Errorf("kyapi %v on a DATA_DIR in use: exit %d; want an error naming DATA_DIR and another process\n%s", args, second.code, out)
		}
		if args[0] == "rebuild" && (strings.Contains(out, " events in ") || !strings.Contains(out, "nothing was rebuilt")) {
			t.Errorf("kyapi rebuild on a DATA_DIR in use rebuilt read models before it stopped\n%s", out)
		}
	}
	if first.ended() || !healthy(read1) {
		t.Fatalf("the first serve stopped serving\n%s", first.output())
	}
}
