// Package openapitest checks HTTP responses against the read API's OpenAPI
// document. It is meant for tests of other packages only.
//
//	v := openapitest.New(t)
//	resp, body := ... // perform a request against the server
//	v.Check(t, req, resp, body)
package openapitest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	"github.com/pb33f/libopenapi-validator/errors"

	"github.com/kyapi/kyapi/openapi"
)

// Validator checks responses against the embedded OpenAPI document.
// It is safe for concurrent use by parallel tests.
type Validator struct {
	v validator.Validator
}

var (
	buildOnce sync.Once
	shared    *Validator
	buildErr  error
)

// New returns a Validator for the embedded document. The document is parsed
// once per test binary; a document that does not parse fails t.
func New(t testing.TB) *Validator {
	t.Helper()
	buildOnce.Do(func() { shared, buildErr = build(openapi.Document()) })
	if buildErr != nil {
		t.Fatalf("openapitest: %v", buildErr)
	}
	return shared
}

func build(spec []byte) (*Validator, error) {
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		return nil, fmt.Errorf("parse OpenAPI document: %w", err)
	}
	// Format assertions make date-time, date and uri checks real; without them
	// JSON Schema treats "format" as an annotation only.
	v, errs := validator.NewValidator(doc, config.WithFormatAssertions())
	if len(errs) > 0 {
		return nil, fmt.Errorf("build validator: %v", errs)
	}
	return &Validator{v: v}, nil
}

// Check validates resp (status code, declared headers and JSON body) against
// the operation the document declares for req's method and path, and reports
// every mismatch with t.Errorf.
//
// body is the response body already read by the caller; if it is nil, Check
// reads resp.Body itself. Either way resp.Body is left readable from the start.
func (v *Validator) Check(t testing.TB, req *http.Request, resp *http.Response, body []byte) {
	t.Helper()
	if body == nil && resp.Body != nil {
		var err error
		body, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			t.Errorf("openapitest: read response body of %s %s: %v", req.Method, req.URL.Path, err)
			return
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	defer func() { resp.Body = io.NopCloser(bytes.NewReader(body)) }()

	ok, errs := v.v.ValidateHttpResponse(req, resp)
	if ok {
		return
	}
	t.Errorf("openapitest: %s %s -> %d does not match the OpenAPI document:\n%s\nbody: %s",
		req.Method, req.URL.Path, resp.StatusCode, describe(errs), truncate(body, 2000))
}

// describe renders validation errors with their schema failures, one per line.
func describe(errs []*errors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "  - %s: %s\n", e.Message, e.Reason)
		for _, f := range e.SchemaValidationErrors {
			loc := f.FieldPath
			if loc == "" {
				loc = "/" + strings.Join(f.InstancePath, "/")
			}
			fmt.Fprintf(&b, "      %s: %s\n", loc, f.Reason)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

func truncate(body []byte, n int) string {
	if len(body) <= n {
		return string(body)
	}
	return string(body[:n]) + "..."
}
