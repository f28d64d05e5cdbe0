package freeport

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// issuedPerProcess is how many ports each of the two processes takes: enough that, drawn at
// random from the 20,000-odd ports below the ephemeral range, two processes that did not see
// each other's would share some (about 15 on average; none with a chance of about 1 in 10^7).
const issuedPerProcess = 600

// go test ./... runs the packages' test binaries side by side (e2e and cmd/kyapi start kyapi
// processes, several packages start redis-server), each handing out ports that a process it
// starts binds only seconds later, after its start-up (a PostgreSQL cluster after initdb; serve
// after its catch-up), or again after an outage it plays. A port issued to one test process and
// not bound yet must not be issued to another, or one of the two processes fails with "address
// already in use".
func TestAPortIssuedToOneProcessIsNotIssuedToAnother(t *testing.T) {
	if os.Getenv("FREEPORT_TEST_OTHER_PROCESS") == "1" {
		for range issuedPerProcess {
			fmt.Println("issued", Addr(t))
		}
		return
	}
	mine := map[string]bool{}
	for range issuedPerProcess {
		mine[Addr(t)] = true
	}
	// The other process: this test binary again, issuing ports while this one holds its own
	// (none bound, as between a pick and the bind of the process it is for).
	other := exec.Command(os.Args[0], "-test.run=^TestAPortIssuedToOneProcessIsNotIssuedToAnother$", "-test.count=1")
	other.Env = append(os.Environ(), "FREEPORT_TEST_OTHER_PROCESS=1")
	out, err := other.CombinedOutput()
	if err != nil {
		t.Fatalf("the other process: %v\n%s", err, out)
	}
	var theirs, both []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "issued "); ok {
			theirs = append(theirs, addr)
			if mine[addr] {
				both = append(both, addr)
			}
		}
	}
	if len(theirs) != issuedPerProcess {
		t.Fatalf("the other process issued %d ports, want %d:\n%s", len(theirs), issuedPerProcess, out)
	}
	if len(both) > 0 {
		t.Fatalf("%d of the %d ports issued to another test process were issued to this one too, unbound: %v",
			len(both), issuedPerProcess, both[:min(len(both), 10)])
	}
}
