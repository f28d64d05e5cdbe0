package domain_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/domain"
)

// A NUL character is refused wherever it is, as a byte or as a \u0000 escape in a string;
// an escaped backslash followed by "u0000" is text, not a NUL, whatever backslashes come
// before it: only an odd run of backslashes before u0000 makes an escape.
func TestANULIsRefusedButABackslashBeforeU0000IsText(t *testing.T) {
	const pre = `{"record":"place","place_id":"p1","name":"Byte Cafe","category":"food.cafe","description":"`
	for _, c := range []struct {
		desc   string // the JSON text between the description's quotes
		nul    bool
		stored string // the description as decoded, when accepted
	}{
		{desc: `C strings end with \u0000`, nul: true},
		{desc: `three backslashes: \\\u0000`, nul: true},
		{desc: `five backslashes: \\\\\u0000`, nul: true},
		{desc: "a raw \x00 byte", nul: true},
		{desc: `C strings end with \\u0000, our coffee never does`, stored: `C strings end with \u0000, our coffee never does`},
		{desc: `four backslashes: \\\\u0000`, stored: `four backslashes: \\u0000`},
		{desc: `\"\\u0000\"`, stored: `"\u0000"`},
		{desc: `\u0001 is not NUL`, stored: "\x01 is not NUL"},
	} {
		line := pre + c.desc + `"}`
		cat, err := domain.ParseCatalog(strings.NewReader(line + "\n"))
		if c.nul {
			var ie *domain.ImportError
			if !errors.As(err, &ie) || ie.Line != 1 || !strings.Contains(ie.Message, "NUL") {
				t.Errorf("%s: got %v; want line 1 refused for its NUL", line, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v; there is no NUL in it", line, err)
			continue
		}
		if got := *cat.Places[0].Description; got != c.stored {
			t.Errorf("%s: description %q, want %q", line, got, c.stored)
		}
	}
	// A NUL in a field name is refused too, though the field is unknown.
	if _, err := domain.ParseCatalog(strings.NewReader(`{"record":"town","slug":"a","name":"A","x\u0000":1}` + "\n")); err == nil {
		t.Error(`a field named "x\u0000" was accepted`)
	}
}

// A UTF-8 byte order mark may start the input (a file saved by a Windows tool, an Excel
// export): it is skipped. Anywhere else it is refused, with a message that says what it is.
func TestAByteOrderMarkMayStartTheInput(t *testing.T) {
	const bom = "\ufeff"
	town := `{"record":"town","slug":"berea","name":"Berea"}`
	for _, text := range []string{bom + town + "\n", bom + "\n" + town + "\n", bom + "  " + town} {
		cat, err := domain.ParseCatalog(strings.NewReader(text))
		if err != nil || len(cat.Towns) != 1 || cat.Towns[0].Slug != "berea" {
			t.Errorf("%q: %v, %d towns; want the town, the byte order mark skipped", text, err, len(cat.Towns))
		}
	}
	_, err := domain.ParseCatalog(strings.NewReader(town + "\n" + bom + town + "\n"))
	var ie *domain.ImportError
	if !errors.As(err, &ie) || ie.Line != 2 || !strings.Contains(ie.Message, "byte order mark") {
		t.Fatalf("a byte order mark starting line 2: %v; want line 2 refused, naming the byte order mark", err)
	}
}

// A NUL or a lone surrogate escape is refused naming the line and the field that holds it
// (decisions.md: a bad line is refused "naming line and field"), nested fields and records
// written under their kind included; a raw NUL byte, which no decoder reads, names the line.
func TestATextProblemNamesTheFieldThatHoldsIt(t *testing.T) {
	for _, c := range []struct{ line, field, message string }{
		{`{"record":"town","slug":"berea","name":"Ber\u0000ea"}`, "name", "NUL"},
		{`{"record":"town","town":{"slug":"berea","name":"Ber\u0000ea"}}`, "name", "NUL"},
		{`{"record":"place","place_id":"p1","name":"Pie Shop","category":"food.cafe","menu":[{"name":"Pie","price":3},{"name":"Tart\u0000","price":2}]}`, "menu[1].name", "NUL"},
		{`{"record":"place","place_id":"p1","name":"Pie Shop","category":"food.cafe","hours":{"mon":[{"open":"09:00","close":"17:00\u0000"}]}}`, "hours.mon[0].close", "NUL"},
		{`{"record":"town","slug":"berea","name":"Ber\ud800ea"}`, "name", "surrogate"},
		{"{\"record\":\"town\",\"slug\":\"berea\",\"name\":\"Ber\xffea\"}", "name", "UTF-8"},
		{"{\"record\":\"town\",\"slug\":\"berea\",\"name\":\"Ber\x00ea\"}", "", "NUL"},
		{`{"record":"town","slug":"berea","name":"Berea"} "x" "after\u0000"`, "", "NUL"},
		// An unknown object on a flat line is named as it is; beside a nested record, a field
		// is not read, and the line alone is named.
		{`{"record":"town","slug":"berea","name":"Berea","place":{"name":"x\u0000"}}`, "place.name", "NUL"},
		{`{"record":"place","place":{"place_id":"p1","name":"Pie","category":"food.cafe"},"name":"x\u0000"}`, "", "NUL"},
		{`{"record":"place","place":{"place_id":"p1","name":"Pie\u0000","category":"food.cafe"},"name":"x"}`, "name", "NUL"},
	} {
		_, err := domain.ParseCatalog(strings.NewReader(c.line + "\n"))
		var ie *domain.ImportError
		if !errors.As(err, &ie) || ie.Line != 1 || ie.Field != c.field || !strings.Contains(ie.Message, c.message) {
			t.Errorf("%q: %v; want line 1, field %q, a message about %s", c.line, err, c.field, c.message)
		}
	}
}
