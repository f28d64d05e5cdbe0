package bleveindex

import (
	"errors"
	"testing"
)

// A disk nearly full takes the small segments bleve persists for each batch but not the larger
// ones its merger writes: failures and successes alternate. The failures are still told at most
// once a minute (docs/operations.md, "DATA_DIR's disk full"): a success does not start the
// minute again, so the log got a failure line and a "writing again" line for every batch
// persisted between two failed merges.
func TestWritesThatSucceedBetweenFailuresDoNotRestartTheMinute(t *testing.T) {
	full := errors.New("no space left on device")
	var got []error
	w := &writeReport{report: func(err error, _ int) { got = append(got, err) }}
	for range 5 {
		w.failed(full)
		w.wrote()
	}
	if len(got) != 2 || got[0] != full || got[1] != nil {
		t.Errorf("five failures each followed by a write that succeeded, within a minute: told %v; want the first failure, then the write after it", got)
	}
}
