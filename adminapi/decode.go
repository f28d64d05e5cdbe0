package adminapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/kyapi/kyapi/internal/httpx"
)

// decodeBody reads one JSON object into dst, refusing unknown fields and trailing data. The
// Content-Type is not checked: operators call this with curl. An empty body is an error
// unless optional.
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
