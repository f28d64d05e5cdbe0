package adminapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/httpx"
)

// decodeBody reads one JSON object into dst (a pointer to a struct of tagged fields),
// refusing unknown fields and trailing data. The Content-Type is not checked: operators call
// this with curl. An empty body is an error unless optional.
//
// encoding/json alone would take a body it cannot represent exactly and decode it anyway:
// field names are matched whatever their case, a repeated field keeps its last value, and
// text that is not UTF-8 (or a lone \u surrogate) becomes U+FFFD. Each of those could make
// two different payment references one, or pay a purchase from a field the operator did not
// mean, so each is a 400 here.
func decodeBody(r *http.Request, dst any, optional bool) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return err
		}
		return httpx.BadRequest("cannot read the request body")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return nil
		}
		return httpx.BadRequest("request body is required: a JSON object")
	}
	if err := domain.CheckJSONText(body); err != nil {
		return httpx.BadRequest("request body: %v", err)
	}
	// A NUL cannot be stored in a text column, and in an event's JSON payload (a revoke's
	// reason) it would stay in the ledger for good: refused in every field, before anything
	// is written (docs/limits.md).
	if field, found := domain.NULField(body); found {
		if field == "" {
			return httpx.BadRequest("request body: NUL characters (\\u0000) are not allowed")
		}
		return httpx.BadRequest("%s: NUL characters (\\u0000) are not allowed", field)
	}
	if err := exactFields(body, dst); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonProblem(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return httpx.BadRequest("request body must hold a single JSON object")
	}
	return nil
}

// exactFields refuses a body object whose fields are not dst's JSON names exactly, or that
// names a field twice. A body that is not an object is left to the decoder to refuse.
func exactFields(body []byte, dst any) error {
	known := map[string]bool{}
	t := reflect.TypeOf(dst).Elem()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		known[name] = true
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil // the decoder names what is wrong
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		name, _ := tok.(string)
		switch {
		case !known[name]:
			return httpx.BadRequest("unknown field %q (field names are case-sensitive)", name)
		case seen[name]:
			return httpx.BadRequest("field %q appears more than once", name)
		}
		seen[name] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// jsonProblem names what is wrong with a body in words an operator can act on.
func jsonProblem(err error) error {
	var (
		syntax    *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
		unmarshal *json.InvalidUnmarshalError
	)
	switch {
	case errors.As(err, &syntax):
		return httpx.BadRequest("malformed JSON at byte %d: %s", syntax.Offset, syntax.Error())
	case errors.Is(err, io.ErrUnexpectedEOF):
		return httpx.BadRequest("malformed JSON: the body ends in the middle of a value")
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return httpx.BadRequest("request body must be a JSON object, not %s", typeErr.Value)
		}
		return httpx.BadRequest("%s: must be %s, not %s", typeErr.Field, jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
	case errors.As(err, &unmarshal):
		return err
	}
	// DisallowUnknownFields reports `json: unknown field "x"`.
	const prefix = "json: "
	msg := err.Error()
	if len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
		msg = msg[len(prefix):]
	}
	return httpx.BadRequest("%s", msg)
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "int", "int64", "int32":
		return "an integer"
	case "struct", "map":
		return "an object"
	case "slice":
		return "an array"
	}
	return "a " + goKind
}

// integer reads a field that must be a JSON integer: 1.5, 5e2 and "500" are refused.
func integer(raw json.RawMessage, field string) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, httpx.BadRequest("%s: is required (an integer)", field)
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, httpx.BadRequest("%s: must be a JSON integer", field)
	}
	return n, nil
}
