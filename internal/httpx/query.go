package httpx

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Query parses a request's query string strictly, for routes that read the named params:
// a pair url.Values would drop silently (one holding a ';', or a broken %-escape) or a named
// param given twice is a 400 naming it. Read leniently, a dropped filter or cursor would be
// answered as its default: an unfiltered list, or a ledger's first page for page N.
func Query(r *http.Request, params ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, queryProblem(r.URL.RawQuery)
	}
	for _, name := range params {
		if len(q[name]) > 1 {
			return nil, BadParam(name, "is given %d times; give it once", len(q[name]))
		}
	}
	return q, nil
}

// BadParam is the 400 of a query parameter, naming it.
func BadParam(name, format string, args ...any) error {
	return BadRequest("parameter %q %s", name, fmt.Sprintf(format, args...))
}

// queryProblem names the first pair of a query string that does not parse.
func queryProblem(raw string) error {
	for _, pair := range strings.Split(raw, "&") {
		name, value, _ := strings.Cut(pair, "=")
		n, nerr := url.QueryUnescape(name)
		if nerr == nil {
			name = n
		}
		switch _, verr := url.QueryUnescape(value); {
		case strings.Contains(pair, ";"):
			return BadParam(name, "holds a ';': separate parameters with '&', and send ';' in a value as %%3B")
		case nerr != nil: // named as sent: it has no other name
			return BadParam(name, "is not a valid percent-encoded name (a '%%' must start %%XX; send '%%' itself as %%25)")
		case verr != nil:
			return BadParam(name, "is not a valid percent-encoded value (a '%%' must start %%XX; send '%%' itself as %%25)")
		}
	}
	return BadRequest("the query string is not valid")
}
