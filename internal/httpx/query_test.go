package httpx

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// Every query string Query refuses is refused naming the pair at fault (docs/limits.md: "400
// naming the parameter"), a broken %-escape in a parameter's name too: "%zz=1" was answered
// "the query string is not valid", which leaves the client to guess which pair.
func TestAQueryThatDoesNotParseIsRefusedNamingThePair(t *testing.T) {
	for raw, want := range map[string]string{
		"q=x&%zz=1":     `parameter "%zz"`,
		"q=x&%zz":       `parameter "%zz"`,
		"q=x&li%6dit%=": `parameter "li%6dit%"`,
		"q=%zz":         `parameter "q"`,
		"q=x;y":         `parameter "q"`,
	} {
		r := httptest.NewRequest("GET", "/api/data/places?"+raw, nil)
		_, err := Query(r, "q")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("?%s: %v; want a 400 naming %s", raw, err, want)
		}
	}
}
