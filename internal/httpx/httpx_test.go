package httpx

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/internal/syncbuf"
)

func TestMapErrorGivesEachErrorItsStatusAndCode(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		status  int
		code    string
		message string
	}{
		{"missing key", domain.ErrMissingKey, 401, "missing_api_key", domain.ErrMissingKey.Error()},
		{"invalid key", domain.ErrInvalidKey, 401, "invalid_api_key", domain.ErrInvalidKey.Error()},
		{"revoked key", domain.ErrKeyRevoked, 403, "revoked_api_key", domain.ErrKeyRevoked.Error()},
		{"insufficient credits", domain.ErrInsufficientCredits, 402, "insufficient_credits", domain.ErrInsufficientCredits.Error()},
		{"account not found", domain.ErrAccountNotFound, 404, "not_found", "account not found"},
		{"key not found", domain.ErrKeyNotFound, 404, "not_found", "key not found"},
		{"wrapped not found", fmt.Errorf("load: %w", domain.ErrAccountNotFound), 404, "not_found", "account not found"},
		{"purchase amount", domain.ErrPurchaseAmount, 400, "bad_request", domain.ErrPurchaseAmount.Error()},
		{"payment ref reused", domain.ErrPaymentRefReused, 400, "bad_request", domain.ErrPaymentRefReused.Error()},
		{"validation", &domain.ValidationError{Field: "email", Message: "must be a plain e-mail address"}, 400, "bad_request", "email: must be a plain e-mail address"},
		{"import line", fmt.Errorf("import: %w", &domain.ImportError{Line: 3, Field: "name", Message: "is required"}), 400, "bad_request", `line 3: field "name": is required`},
		{"bad request", BadRequest("limit must be an integer between %d and %d", 1, 1000), 400, "bad_request", "limit must be an integer between 1 and 1000"},
		{"body too large", &http.MaxBytesError{Limit: 10}, 413, "bad_request", "request body is larger than 10 bytes"},
		{"deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), 503, "internal", "service temporarily unavailable"},
		{"connect", &pgconn.ConnectError{}, 503, "internal", "service temporarily unavailable"},
		{"server shutting down", &pgconn.PgError{Code: "57P01"}, 503, "internal", "service temporarily unavailable"},
		{"connection dropped without a word", fmt.Errorf("load place: %w", io.ErrUnexpectedEOF), 503, "internal", "service temporarily unavailable"},
		{"statement_timeout", &pgconn.PgError{Code: "57014"}, 503, "internal", "service temporarily unavailable"},
		{"a pooled connection found closed", fmt.Errorf("failed to deallocate cached statement(s): %w", pgconn.ErrConnClosed), 503, "internal", "service temporarily unavailable"},
		{"lock_timeout", &pgconn.PgError{Code: "55P03"}, 503, "internal", "service temporarily unavailable"},
		{"read-only database", &pgconn.PgError{Code: "25006"}, 503, "internal", "service temporarily unavailable"},
		{"disk full", &pgconn.PgError{Code: "53100"}, 503, "internal", "service temporarily unavailable"},
		{"out of memory", &pgconn.PgError{Code: "53200"}, 503, "internal", "service temporarily unavailable"},
		{"too many connections", &pgconn.PgError{Code: "53300"}, 503, "internal", "service temporarily unavailable"},
		{"NUL in text", fmt.Errorf("load place: %w", &pgconn.PgError{Code: "22021", Message: "invalid byte sequence for encoding \"UTF8\": 0x00"}), 400, "bad_request",
			"input the database cannot store (for example a NUL character or an out-of-range value)"},
		{"constraint violation", &pgconn.PgError{Code: "23505", Message: "duplicate key value violates unique constraint \"secret\""}, 500, "internal", "internal error"},
		{"anything else", errors.New("disk on fire at /var/lib/secret"), 500, "internal", "internal error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := MapError(tt.err)
			want := Error{Status: tt.status, Code: tt.code, Message: tt.message}
			if tt.status == 503 {
				want.Outcome = OutcomeNone // nothing was charged
			}
			if got != want {
				t.Errorf("MapError(%v) = %+v, want %+v", tt.err, got, want)
			}
		})
	}
}

func TestWriteDataAndWriteErrorUseTheEnvelope(t *testing.T) {
	w := httptest.NewRecorder()
	WriteData(w, 201, map[string]string{"account_id": "acc_1"})
	if w.Code != 201 || w.Header().Get("Content-Type") != "application/json; charset=utf-8" ||
		strings.TrimSpace(w.Body.String()) != `{"data":{"account_id":"acc_1"}}` {
		t.Errorf("WriteData: %d %q %s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	w = httptest.NewRecorder()
	MapError(domain.ErrKeyNotFound).Write(w)
	if w.Code != 404 || strings.TrimSpace(w.Body.String()) != `{"error":"key not found","code":"not_found"}` {
		t.Errorf("error body: %d %s", w.Code, w.Body)
	}
}

// The request id is always the service's own: one a caller sends is a header value, which
// the logs never hold (it may be anything, an API key included).
func TestRequestIDIsAlwaysFreshNeverTheCallers(t *testing.T) {
	seenIDs := map[string]bool{}
	for _, incoming := range []string{"abc-DEF_123", "svc_live_SECRETsecretSECRETsecretSECRETsecret", strings.Repeat("a", 65), "inject\nheader", ""} {
		var seen string
		h := RequestID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = RequestIDFrom(r.Context()) }))
		r := httptest.NewRequest("GET", "/", nil)
		if incoming != "" {
			r.Header[RequestIDHeader] = []string{incoming}
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if got := w.Header().Get(RequestIDHeader); got != seen {
			t.Errorf("header %q differs from context %q", got, seen)
		}
		if seen == incoming || len(seen) != 32 || seenIDs[seen] {
			t.Errorf("incoming %q: got %q, want a fresh 32-hex id", incoming, seen)
		}
		seenIDs[seen] = true
	}
}

func TestAccessLogWritesOneLineWithoutSecretsOrQuery(t *testing.T) {
	var buf bytes.Buffer
	logger := logrus.New()
	logger.SetOutput(&buf)
	logger.SetFormatter(&logrus.JSONFormatter{})

	router := mux.NewRouter()
	router.Use(AccessLog(logger))
	router.HandleFunc("/places/{placeId}", func(w http.ResponseWriter, r *http.Request) {
		WriteData(w, 200, "ok")
	}).Methods("GET")
	router.NotFoundHandler = AccessLog(logger)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, 404, CodeNotFound, "no such route")
	}))
	h := RequestID(router)

	const secret = "svc_live_SECRETsecretSECRETsecretSECRETsecret"
	r := httptest.NewRequest("GET", "/places/plc_42?token=QUERYSECRET&q=bourbon", nil)
	r.Header.Set("Authorization", "Bearer "+secret)
	r.Header.Set(RequestIDHeader, "req-1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one line, got %d: %s", len(lines), buf.String())
	}
	for _, leak := range []string{secret, "Bearer", "QUERYSECRET", "token", "bourbon", "?", "req-1"} {
		if strings.Contains(lines[0], leak) {
			t.Errorf("log line contains %q: %s", leak, lines[0])
		}
	}
	var entry map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &entry); err != nil {
		t.Fatalf("not JSON: %v: %s", err, lines[0])
	}
	want := map[string]any{"route": "/places/{placeId}", "method": "GET", "status": float64(200), "resource_id": "plc_42", "request_id": w.Header().Get(RequestIDHeader)}
	for k, v := range want {
		if entry[k] != v {
			t.Errorf("%s = %v, want %v", k, entry[k], v)
		}
	}
	for _, k := range []string{"time", "duration_ms"} {
		if _, ok := entry[k]; !ok {
			t.Errorf("missing %s: %s", k, lines[0])
		}
	}

	buf.Reset()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/nowhere?key=abc", nil))
	if err := json.Unmarshal(buf.Bytes(), &entry); err != nil {
		t.Fatalf("not JSON: %v: %s", err, buf.String())
	}
	if entry["route"] != "unmatched" || entry["status"] != float64(404) || strings.Contains(buf.String(), "nowhere") {
		t.Errorf("unmatched request logged as %s", buf.String())
	}
}

func TestLimitBodyStopsReadingPastTheLimit(t *testing.T) {
	var readErr error
	h := LimitBody(4)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, readErr = new(bytes.Buffer).ReadFrom(r.Body)
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/", strings.NewReader("12345")))
	if got := MapError(readErr); got.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("read error %v maps to %+v", readErr, got)
	}
}

// A value that cannot be encoded (a time past year 9999) is answered 500 with the error body,
// not the status meant for it with an empty body: the status line goes out only once the
// body is encoded.
func TestWriteJSONAnswersAnErrorBodyWhenTheValueCannotBeEncoded(t *testing.T) {
	rec := httptest.NewRecorder()
	WriteData(rec, http.StatusOK, struct {
		At time.Time `json:"at"`
	}{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)})
	if rec.Code != http.StatusInternalServerError || strings.TrimSpace(rec.Body.String()) != `{"error":"internal error","code":"internal"}` {
		t.Errorf("%d %q, want 500 and the internal error body", rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	WriteData(rec, http.StatusCreated, map[string]int{"n": 1})
	if rec.Code != http.StatusCreated || strings.TrimSpace(rec.Body.String()) != `{"data":{"n":1}}` {
		t.Errorf("%d %q, want 201 and the data", rec.Code, rec.Body.String())
	}
}

// Every 5xx has the code decisions.md lists for it, `internal`; a 503 says when to retry and,
// in X-Charge-Outcome, whether the request may have been charged: "none" (nothing was) or
// "unknown" (the charge's COMMIT was sent and its fate could not be found out).
func TestA503SaysItsChargeOutcomeInAHeaderAndItsCodeIsInternal(t *testing.T) {
	for _, c := range []struct {
		err     error
		outcome string
	}{
		{domain.ErrUnavailable, OutcomeNone},
		{fmt.Errorf("charge: %w", domain.ErrOutcomeUnknown), OutcomeUnknown},
		{&pgconn.ConnectError{}, OutcomeNone},
	} {
		w := httptest.NewRecorder()
		MapError(c.err).Write(w)
		var body map[string]string
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if w.Code != 503 || body["code"] != CodeInternal || w.Header().Get(ChargeOutcomeHeader) != c.outcome ||
			w.Header().Get("Retry-After") != "1" || len(body) != 2 || body["error"] == "" {
			t.Errorf("%v: %d %v %s", c.err, w.Code, w.Header(), w.Body)
		}
	}
	w := httptest.NewRecorder()
	MapError(errors.New("bug")).Write(w)
	if w.Header().Get(ChargeOutcomeHeader) != "" || w.Header().Get("Retry-After") != "" {
		t.Errorf("a 500 has %v", w.Header())
	}
}

// A query on a connection found closed (the server terminated it: pgx then fails the next use
// before sending anything) is a database fault, 503 nothing charged: it answered 500 to one
// request of e2e TestAStatementTimeoutOnTheRoleMidLoadAnswers503NotInternal.
func TestAQueryOnAConnectionFoundClosedIs503(t *testing.T) {
	conn, err := pgx.Connect(context.Background(), pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.PgConn().Close(context.Background())
	_, err = conn.Exec(context.Background(), "SELECT 1")
	if err == nil {
		t.Fatal("a query on a closed connection succeeded")
	}
	if got := MapError(err); got.Status != http.StatusServiceUnavailable || got.Outcome != OutcomeNone {
		t.Fatalf("MapError(%v) = %+v, want 503 with nothing charged", err, got)
	}
}

// A handler that panics is answered 500 with the error body and logged, with its stack; one
// that panics with its answer begun has that answer cut short, not passed off as whole.
func TestAPanickingHandlerIsAnswered500AndLogged(t *testing.T) {
	var buf syncbuf.Buffer
	logger := logrus.New()
	logger.SetOutput(&buf)
	logger.SetFormatter(&logrus.JSONFormatter{})
	router := mux.NewRouter()
	router.Use(AccessLog(logger))
	router.HandleFunc("/bonus-grants/{outageId}", func(w http.ResponseWriter, r *http.Request) { panic("a bug") })
	router.HandleFunc("/begun", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		_, _ = w.Write([]byte(`{"data":`))
		w.(http.Flusher).Flush()
		panic("a bug mid-answer")
	})
	srv := httptest.NewServer(RequestID(router))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/bonus-grants/outage-7")
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 || !strings.Contains(string(body), `"code":"internal"`) || resp.Header.Get(RequestIDHeader) == "" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	log := buf.String()
	for _, want := range []string{`"msg":"request handler panicked"`, `"panic":"a bug"`, `"status":500`, `"resource_id":"outage-7"`, `"route":"/bonus-grants/{outageId}"`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s: %s", want, log)
		}
	}

	resp, err = http.Get(srv.URL + "/begun")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("an answer cut short by a panic was read as whole")
	}
}

// A request refused for its headers (431) gets a request id and its access-log line too.
func TestARequestRefusedForItsHeadersIsLoggedWithAnID(t *testing.T) {
	var buf syncbuf.Buffer
	logger := logrus.New()
	logger.SetOutput(&buf)
	logger.SetFormatter(&logrus.JSONFormatter{})
	h := LimitHeaders(1024, logger, nil)(http.NotFoundHandler())
	r := httptest.NewRequest("GET", "/api/data/towns", nil)
	r.Header.Set("X-Pad", strings.Repeat("a", 2048))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	id := w.Header().Get(RequestIDHeader)
	if w.Code != http.StatusRequestHeaderFieldsTooLarge || id == "" {
		t.Fatalf("%d, request id %q", w.Code, id)
	}
	var entry map[string]any
	if err := json.Unmarshal([]byte(buf.String()), &entry); err != nil {
		t.Fatalf("want one JSON line: %v: %s", err, buf.String())
	}
	if entry["status"] != float64(431) || entry["request_id"] != id || entry["route"] != "unmatched" || strings.Contains(buf.String(), "aaaa") {
		t.Fatalf("logged %s", buf.String())
	}
}

// The admin token and the console's CSRF and sign-in secrets are compared by SameSecret: equal
// secrets only, never an empty one, a prefix or an extension of the expected one.
func TestSameSecretIsEqualityOfNonEmptySecrets(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"dev-admin-token", "dev-admin-token", true},
		{"dev-admin-token", "dev-admin-toke", false},
		{"dev-admin-token", "dev-admin-tokenX", false},
		{"dev-admin-token", "Dev-admin-token", false},
		{"", "", false},
		{"", "dev-admin-token", false},
		{"dev-admin-token", "", false},
	} {
		if got := SameSecret(c.a, c.b); got != c.want {
			t.Errorf("SameSecret(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// The access-log line of a request whose client went away before its answer says 499, as
// /metrics counts it, not the 503 its handler wrote to nobody (docs/operations.md, "Metrics").
func TestARequestWhoseClientWentAwayIsLoggedAs499(t *testing.T) {
	var buf syncbuf.Buffer
	logger := logrus.New()
	logger.SetOutput(&buf)
	logger.SetFormatter(&logrus.JSONFormatter{})
	started := make(chan struct{})
	router := mux.NewRouter()
	router.Use(AccessLog(logger))
	router.HandleFunc("/places/{placeId}", func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		WriteError(w, http.StatusServiceUnavailable, CodeInternal, "service temporarily unavailable")
	})
	srv := httptest.NewServer(RequestID(router))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/places/p-9", nil)
	go func() {
		<-started
		cancel()
	}()
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the canceled request was answered %d", resp.StatusCode)
	}
	srv.Close() // waits for the handler and its log line
	if log := buf.String(); !strings.Contains(log, `"status":499`) || !strings.Contains(log, `"resource_id":"p-9"`) {
		t.Fatalf("log line: %s", log)
	}
}
