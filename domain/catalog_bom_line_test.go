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
