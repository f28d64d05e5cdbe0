package domain

import (
	"fmt"
	"strings"
	"testing"
)

// README: "a UTF-8 byte order mark starting a file is skipped"; docs: a line may hold 1 MiB
// "without the line break". A first line of exactly MaxImportLine bytes is accepted without a
// BOM, but with the (skipped) BOM in front the scanner's buffer (MaxImportLine+1) overflows and
// the line is refused as longer than 1 MiB.
func TestAByteOrderMarkBeforeAFullLengthFirstLineIsAccepted(t *testing.T) {
	head := `{"record":"town","slug":"x","name":"X","pad":"`
	line := head + strings.Repeat("a", MaxImportLine-len(head)-2) + `"}`
	if len(line) != MaxImportLine {
		t.Fatal(len(line))
	}
	_, plain := ParseCatalog(strings.NewReader(line + "\n"))
	_, bom := ParseCatalog(strings.NewReader("\xEF\xBB\xBF" + line + "\n"))
	if fmt.Sprint(plain) != fmt.Sprint(bom) {
		t.Fatalf("same line, with and without a leading BOM:\n without: %v\n with:    %v", plain, bom)
	}
}

// docs/limits.md, "Catalog import": a line holds 1 MiB "without the line break", and a BOM
// at the start of the input is skipped. A file written by a Windows tool has both a BOM and
// CRLF line breaks: its full-length first line is accepted as it is with either alone.
func TestAFullLengthFirstLineIsAcceptedAfterABOMAndBeforeACRLF(t *testing.T) {
	head := `{"record":"town","slug":"x","name":"X","pad":"`
	line := head + strings.Repeat("a", MaxImportLine-len(head)-2) + `"}`
	if len(line) != MaxImportLine {
		t.Fatal(len(line))
	}
	next := `{"record":"town","slug":"y","name":"Y"}`
	for _, tc := range []struct {
		name, input string
		towns       int
	}{
		{"no BOM, CRLF", line + "\r\n", 1},
		{"BOM, LF", "\xEF\xBB\xBF" + line + "\n", 1},
		{"BOM, CRLF", "\xEF\xBB\xBF" + line + "\r\n", 1},
		{"BOM, CRLF, a second line", "\xEF\xBB\xBF" + line + "\r\n" + next + "\r\n", 2},
		{"BOM, CRLF, a full-length second line", "\xEF\xBB\xBF" + next + "\r\n" + strings.Replace(line, `"x"`, `"z"`, 1) + "\r\n", 2},
	} {
		c, err := ParseCatalog(strings.NewReader(tc.input))
		if err != nil || len(c.Towns) != tc.towns {
			t.Errorf("%s: %v (%d towns), want the lines accepted (%d towns)", tc.name, err, len(c.Towns), tc.towns)
		}
	}
	// One byte more is still refused, whatever follows it.
	for _, end := range []string{"\n", "\r\n", ""} {
		_, err := ParseCatalog(strings.NewReader("\xEF\xBB\xBF" + line + "a" + end))
		if err == nil || !strings.Contains(err.Error(), "line 1: line is longer than 1 MiB") {
			t.Errorf("a first line of 1 MiB and a byte, then %q: %v, want it refused as longer than 1 MiB", end, err)
		}
	}
}
