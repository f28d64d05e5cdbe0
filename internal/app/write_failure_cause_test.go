package app

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
)

// The log line of a failed write of DATA_DIR's place index names the cause the error gives
// (docs/operations.md, "DATA_DIR's disk full"): a full disk is told to free space, a
// read-only one to be made writable, and any other failure is not called a full disk. bleve
// wraps the system's error as text, so the words are what is read.
func TestAFailedIndexWriteIsToldByItsCause(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("error persisting segment: %v", fmt.Errorf("write /d/x.zap: %w", syscall.ENOSPC)), "its disk is full"},
		{fmt.Errorf("write: %w", syscall.EDQUOT), "its disk is full"},
		{fmt.Errorf("error persisting segment: %v", fmt.Errorf("open /d/x.zap: %w", syscall.EROFS)), "read-only or not writable"},
		{fmt.Errorf("open: %w", syscall.EACCES), "read-only or not writable"},
		{fmt.Errorf("error persisting segment: %v", syscall.EIO), "see the error"},
	} {
		if got := writeFailureCause(c.err); !strings.Contains(got, c.want) {
			t.Errorf("%v: told %q, want %q", c.err, got, c.want)
		}
	}
}
