package projections

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

// A subscriber that cannot find its next range tries again every poll (50 ms) while the cause
// lasts, and the errors may differ each time (a request id, a position): one line a minute,
// whatever they say, with the count of those it did not log.
func TestASubscribersErrorsAreLoggedOnceAMinuteWhateverTheySay(t *testing.T) {
	var out bytes.Buffer
	log := logrus.New()
	log.SetOutput(&out)
	s := &rangeSubscriber{projection: PlaceIndex{}, log: log}
	for i := range 100 {
		s.logError(context.Background(), "finding its next range", fmt.Errorf("attempt %d: %w", i, errors.New("database away")))
	}
	if n := strings.Count(out.String(), "level=error"); n != 1 {
		t.Fatalf("100 errors in a row logged %d lines, want 1:\n%s", n, out.String())
	}
	s.lastErrAt = s.lastErrAt.Add(-61e9) // a minute later
	s.logError(context.Background(), "finding its next range", errors.New("database away"))
	if !strings.Contains(out.String(), "errors_not_logged=99") {
		t.Fatalf("the next line does not count the 99 errors not logged:\n%s", out.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.lastErrAt = s.lastErrAt.Add(-61e9)
	before := out.Len()
	s.logError(ctx, "finding its next range", context.Canceled)
	if out.Len() != before {
		t.Fatalf("an error of a subscriber stopping was logged: %s", out.String()[before:])
	}
}
