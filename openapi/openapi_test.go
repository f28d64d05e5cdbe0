package openapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/kyapi/kyapi/openapi"
)

func TestDocumentIsValidOpenAPI31WithVersion010(t *testing.T) {
	doc, err := libopenapi.NewDocument(openapi.Document())
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if got := doc.GetVersion(); got != "3.1.0" {
		t.Errorf("openapi version = %q, want 3.1.0", got)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("build v3 model: %v", err)
	}
	if got := model.Model.Info.Version; got != "0.1.0" {
		t.Errorf("info.version = %q, want 0.1.0", got)
	}
	if got := model.Model.Info.Title; got != "Kentucky Business Data API" {
		t.Errorf("info.title = %q", got)
	}

	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("new validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("document does not conform to the OpenAPI 3.1 schema: %v", e)
		}
	}
}

func TestDocumentDescribesEveryPublicPath(t *testing.T) {
	doc, err := libopenapi.NewDocument(openapi.Document())
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("build v3 model: %v", err)
	}
	want := []struct {
		path    string
		secured bool
	}{
		{"/api/data/places", true},
		{"/api/data/places/{placeId}", true},
		{"/api/data/places/{placeId}/menu", true},
		{"/api/data/places/{placeId}/reviews", true},
		{"/api/data/places/{placeId}/related", true},
		{"/api/data/search", true},
		{"/api/data/trending", true},
		{"/api/data/hidden-gems", true},
		{"/api/data/towns", true},
		{"/api/data/events", true},
		{"/openapi.json", false},
		{"/healthz", false},
	}
	paths := model.Model.Paths.PathItems
	if got := paths.Len(); got != len(want) {
		t.Errorf("document has %d paths, want %d", got, len(want))
	}
	for _, w := range want {
		item, ok := paths.Get(w.path)
		if !ok || item.Get == nil {
			t.Errorf("GET %s is missing", w.path)
			continue
		}
		secured := len(item.Get.Security) > 0
		if secured != w.secured {
			t.Errorf("GET %s secured = %v, want %v", w.path, secured, w.secured)
		}
		if w.secured && item.Get.Responses.Codes.GetOrZero("200").Headers.GetOrZero("X-Credits-Remaining") == nil {
			t.Errorf("GET %s 200 does not declare X-Credits-Remaining", w.path)
		}
		// A data request's body is read and dropped (readapi.dropBody): over 64 KiB it is 413,
		// broken off before its end 400, on every data route.
		if w.secured {
			for _, code := range []string{"400", "413"} {
				if item.Get.Responses.Codes.GetOrZero(code) == nil {
					t.Errorf("GET %s does not declare %s (a request body that is too large or cannot be read)", w.path, code)
				}
			}
		}
		// A method the path does not take is 405 with Allow (readapi's MethodNotAllowedHandler),
		// said in the introduction and the MethodNotAllowed response, not as operations: a
		// client generated from the document would get calls that can only fail.
		for m, op := range map[string]*v3.Operation{"PUT": item.Put, "POST": item.Post, "DELETE": item.Delete,
			"OPTIONS": item.Options, "PATCH": item.Patch, "TRACE": item.Trace} {
			if op != nil {
				t.Errorf("%s %s is an operation of the document, but the server only refuses it (405)", m, w.path)
			}
		}
		if w.secured && item.Head != nil {
			t.Errorf("HEAD %s is an operation of the document, but the server only refuses it (405)", w.path)
		} else if !w.secured && (item.Head == nil || len(item.Head.Security) > 0) {
			t.Errorf("HEAD %s is missing, or asks for a key", w.path)
		}
	}
	r := model.Model.Components.Responses.GetOrZero("MethodNotAllowed")
	if r == nil || r.Headers.GetOrZero("Allow") == nil || !strings.Contains(model.Model.Info.Description, "405") {
		t.Error("the document does not say that a method a path does not take is 405 with Allow")
	}
}

func TestDocumentReturnsACopy(t *testing.T) {
	a := openapi.Document()
	a[0] = 'x'
	var v map[string]any
	if err := json.Unmarshal(openapi.Document(), &v); err != nil {
		t.Fatalf("document changed by a caller's write: %v", err)
	}
}

// Every answer of the read address carries X-Request-Id (httpx.RequestID, outside the router:
// docs/operations.md, "Request ids"), and every 503 says Retry-After and X-Charge-Outcome
// (httpx.Error.Write: docs/api.md, "The two 503 answers"). The document declares each of them
// wherever the server sends it, and as required: a client may count on what it always gets.
func TestHeadersEveryAnswerCarriesAreDeclaredRequired(t *testing.T) {
	doc, err := libopenapi.NewDocument(openapi.Document())
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("build v3 model: %v", err)
	}
	check := func(where, code string, r *v3.Response) {
		want := []string{"X-Request-Id"}
		if code == "503" {
			want = append(want, "Retry-After", "X-Charge-Outcome")
		}
		for _, name := range want {
			var h *v3.Header
			if r.Headers != nil {
				h = r.Headers.GetOrZero(name)
			}
			if h == nil || !h.Required {
				t.Errorf("%s %s: %s is not a required header", where, code, name)
			}
		}
	}
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			for code, r := range op.Responses.Codes.FromOldest() {
				check(strings.ToUpper(method)+" "+path, code, r)
			}
		}
	}
	for name, r := range model.Model.Components.Responses.FromOldest() {
		code := map[string]string{"Unavailable": "503"}[name]
		check("components/responses/"+name, code, r)
	}
}

// The document served states the default cap the server was started with (RATE_LIMIT_PER_MINUTE):
// every statement of it, and the quota policy examples, say that number instead of 60.
func TestDocumentForStatesTheConfiguredDefaultCap(t *testing.T) {
	if string(openapi.DocumentFor(60)) != string(openapi.Document()) || string(openapi.DocumentFor(0)) != string(openapi.Document()) {
		t.Error("DocumentFor(60) or DocumentFor(0) is not the document as written")
	}
	doc := string(openapi.DocumentFor(120))
	for _, p := range []string{"The default cap is %d requests per minute per key", "The per-key request cap (%d per minute by default)", `\"default\";q=%d;w=60`} {
		if !strings.Contains(doc, fmt.Sprintf(p, 120)) || strings.Contains(doc, fmt.Sprintf(p, 60)) {
			t.Errorf("the document for a cap of 120: %q is not said with 120 everywhere", p)
		}
	}
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Errorf("the document for a cap of 120 is not JSON: %v", err)
	}
}

// The RateLimit example (remaining requests in a window) is one request into a window of the
// default cap: for a cap of 5, an example saying 59 remain contradicts the RateLimit-Policy
// example beside it (q=5) and the header's own definition.
func TestDocumentForKeepsTheRemainingExampleWithinTheConfiguredCap(t *testing.T) {
	doc := string(openapi.DocumentFor(5))
	if strings.Contains(doc, `\"default\";r=59;t=42`) || !strings.Contains(doc, `\"default\";r=4;t=42`) {
		t.Errorf("the document for a cap of 5 does not give the RateLimit example as r=4 (one request into the window)")
	}
}
