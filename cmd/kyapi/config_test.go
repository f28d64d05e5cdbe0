package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/internal/app"
	"github.com/kyapi/kyapi/internal/pgtest"
	"github.com/kyapi/kyapi/internal/silenttest"
)

// The defaults (README, "Configuration"), and a bad RATE_LIMIT_PER_MINUTE, REDIS_TIMEOUT or
// METER_MAX_CLAIMS named.
func TestConfigDefaults(t *testing.T) {
	for _, v := range []string{"READ_ADDR", "ADMIN_ADDR", "RATE_LIMIT_PER_MINUTE", "ELASTICSEARCH_URL", "CANONICAL_BASE_URL", "LOG_LEVEL", "REDIS_TIMEOUT", "METER_MAX_CLAIMS"} {
		t.Setenv(v, "")
	}
	t.Setenv("DATABASE_URL", "postgres://x@127.0.0.1:1/x")
	cfg, err := app.LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ReadAddr != ":8080" || cfg.AdminAddr != "127.0.0.1:8081" || cfg.RateLimit != 60 || cfg.ElasticsearchURL != "" ||
		cfg.CanonicalBaseURL != "http://localhost:8080" || cfg.LogLevel != "info" || cfg.RedisTimeout != time.Second ||
		cfg.MeterMaxClaims != commands.DefaultMaxClaims {
		t.Fatalf("defaults: %+v", cfg)
	}
	for _, bad := range []string{"1", "0s", "-1s", "soon"} {
		t.Setenv("REDIS_TIMEOUT", bad)
		if _, err := app.LoadConfig(); err == nil || !strings.Contains(err.Error(), "REDIS_TIMEOUT") {
			t.Errorf("REDIS_TIMEOUT=%s: %v; want an error naming it", bad, err)
		}
	}
	t.Setenv("REDIS_TIMEOUT", "250ms")
	if cfg, err := app.LoadConfig(); err != nil || cfg.RedisTimeout != 250*time.Millisecond {
		t.Errorf("REDIS_TIMEOUT=250ms: %v, %v", err, cfg.RedisTimeout)
	}
	t.Setenv("REDIS_TIMEOUT", "")
	for _, bad := range []string{"0", "-5", "4M", "1e6"} {
		t.Setenv("METER_MAX_CLAIMS", bad)
		if _, err := app.LoadConfig(); err == nil || !strings.Contains(err.Error(), "METER_MAX_CLAIMS") {
			t.Errorf("METER_MAX_CLAIMS=%s: %v; want an error naming it", bad, err)
		}
	}
	t.Setenv("METER_MAX_CLAIMS", "10000000")
	if cfg, err := app.LoadConfig(); err != nil || cfg.MeterMaxClaims != 10_000_000 {
		t.Errorf("METER_MAX_CLAIMS=10000000: %v, %v", err, cfg.MeterMaxClaims)
	}
	t.Setenv("METER_MAX_CLAIMS", "")
	for _, v := range []string{"READ_ADDR", "ADMIN_ADDR"} {
		for _, bad := range []string{"8080", "localhost", "127.0.0.1:", "::1"} {
			t.Setenv(v, bad)
			if _, err := app.LoadConfig(); err == nil || !strings.Contains(err.Error(), v) {
				t.Errorf("%s=%s: %v; want an error naming it", v, bad, err)
			}
		}
		t.Setenv(v, "")
	}
	t.Setenv("RATE_LIMIT_PER_MINUTE", "sixty")
	if _, err := app.LoadConfig(); err == nil || !strings.Contains(err.Error(), "RATE_LIMIT_PER_MINUTE") {
		t.Fatalf("RATE_LIMIT_PER_MINUTE=sixty: %v; want an error naming it", err)
	}
}

// CANONICAL_BASE_URL must be an absolute http or https URL with a host: without a scheme
// every canonical_url served would be "api.example.com/places/{id}", not a URI. Trailing
// slashes are dropped, so that {base}/places/{id} holds no "//".
func TestCanonicalBaseURLMustBeAnAbsoluteHTTPURL(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://x@127.0.0.1:1/x")
	for value, want := range map[string]string{
		"https://api.example.com":         "https://api.example.com",
		"https://api.example.com/":        "https://api.example.com",
		"http://localhost:8080":           "http://localhost:8080",
		"https://example.com/kyapi//":     "https://example.com/kyapi",
		"HTTPS://API.EXAMPLE.COM":         "HTTPS://API.EXAMPLE.COM",
		"api.example.com":                 "",
		"//api.example.com":               "",
		"ftp://api.example.com":           "",
		"https://":                        "",
		"https:///places":                 "",
		"http://:8080":                    "",
		"https://user:pw@api.example.com": "",
		"https://api.example.com/?x=1":    "",
		"https://api.example.com/#top":    "",
		" https://api.example.com":        "",
		// canonical_url is a URI: what a URI cannot hold unescaped is refused, not served.
		"https://example.com/my api":    "",
		`https://example.com/a"b`:       "",
		"https://example.com/<x>":       "",
		`https://example.com/a\b`:       "",
		"https://example.com/50%":       "",
		"https://example.com/%zz":       "",
		"https://example.com/caf%C3%A9": "https://example.com/caf%C3%A9",
		"https://example.com/a[1]":      "",
		"https://café.example":          "", // write it https://xn--caf-dma.example
		"https://xn--caf-dma.example":   "https://xn--caf-dma.example",
		"http://[::1]:8080":             "http://[::1]:8080",
		"https://api<x>.example":        "",
		`https://a"b.example`:           "",
		"http://[fe80::1%25é]":          "",
		"https://a\xffb.example":        "",
		"https://example.com/a~b-c_d.e": "https://example.com/a~b-c_d.e",
	} {
		t.Setenv("CANONICAL_BASE_URL", value)
		cfg, err := app.LoadConfig()
		switch {
		case want == "" && (err == nil || !strings.Contains(err.Error(), "CANONICAL_BASE_URL")):
			t.Errorf("CANONICAL_BASE_URL=%q: %v (base %q); want an error naming the variable", value, err, cfg.CanonicalBaseURL)
		case want != "" && (err != nil || cfg.CanonicalBaseURL != want):
			t.Errorf("CANONICAL_BASE_URL=%q: %v, base %q; want %q", value, err, cfg.CanonicalBaseURL, want)
		}
	}
	t.Setenv("CANONICAL_BASE_URL", "https://café.example/a b")
	if _, err := app.LoadConfig(); err == nil || !strings.Contains(err.Error(), "write it https://xn--caf-dma.example/a%20b") {
		t.Errorf("CANONICAL_BASE_URL not written as a URI: %v; want the form to write", err)
	}
}

// ADMIN_TOKEN is a bearer token: one with white space at either end (a secret file's trailing
// newline) or a control character could never be presented (HTTP trims a header value), and
// every admin call would be 401 without a word. It stops every command at start, naming the
// variable and never showing the token.
func TestAnAdminTokenThatCannotBeSentIsRefused(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://x@127.0.0.1:1/x")
	for value, ok := range map[string]bool{
		"s3cret-admin-token":   true,
		"":                     true, // serve warns: the admin API refuses every call
		"s3cret-admin-token\n": false,
		" s3cret-admin-token":  false,
		"s3cret\tadmin":        true, // a tab inside a field value is sent as it is
		"s3cret\radmin":        false,
	} {
		t.Setenv("ADMIN_TOKEN", value)
		_, err := app.LoadConfig()
		switch {
		case ok && err != nil:
			t.Errorf("ADMIN_TOKEN=%q: %v", value, err)
		case !ok && (err == nil || !strings.Contains(err.Error(), "ADMIN_TOKEN")):
			t.Errorf("ADMIN_TOKEN=%q: %v; want an error naming the variable", value, err)
		case !ok && strings.Contains(err.Error(), "s3cret"):
			t.Errorf("ADMIN_TOKEN=%q: the error shows the token: %v", value, err)
		}
	}
}

// ELASTICSEARCH_URL is checked with the rest of the configuration, naming the variable, and
// the error never shows a password the value holds.
func TestElasticsearchURLMustBeAnHTTPURL(t *testing.T) {
	checkURLVariable(t, "ELASTICSEARCH_URL", map[string]bool{
		"http://localhost:9200":                true,
		"https://user:secret@es.example.com":   true,
		"https://es.example.com:9243/prefix":   true,
		"notaurl":                              false,
		"localhost:9200":                       false,
		"ftp://es.example.com":                 false,
		"http://":                              false,
		"https://user:secret@:9200":            false,
		"http://user:secret@es example.com/%z": false,
	})
}

// REDIS_URL is checked with the rest of the configuration, not once serve has caught up its
// projections, naming the variable, and the error never shows a password the value holds.
func TestRedisURLMustBeARedisURL(t *testing.T) {
	checkURLVariable(t, "REDIS_URL", map[string]bool{
		"redis://localhost:6379/0":            true,
		"redis://:secret@localhost:6379":      true,
		"rediss://user:secret@redis.example":  true,
		"unix:///run/redis/redis.sock?db=1":   true,
		"unix://:secret@/run/redis.sock?db=x": false,
		"foo":                                 false,
		"localhost:6379":                      false,
		"http://localhost:6379":               false,
		"redis://localhost:6379/x":            false,
		"redis://:secret@localhost:6379/%zz":  false,
		"redis://user:secret@local host:6379": false,
	})
}

// checkURLVariable sets the variable name to each value: LoadConfig accepts it (true) or
// refuses it naming the variable and without the password "secret" the value holds (false).
func checkURLVariable(t *testing.T, name string, values map[string]bool) {
	t.Helper()
	t.Setenv("DATABASE_URL", "postgres://x@127.0.0.1:1/x")
	for value, ok := range values {
		t.Setenv(name, value)
		_, err := app.LoadConfig()
		switch {
		case ok && err != nil:
			t.Errorf("%s=%q: %v", name, value, err)
		case !ok && (err == nil || !strings.Contains(err.Error(), name)):
			t.Errorf("%s=%q: %v; want an error naming the variable", name, value, err)
		case !ok && strings.Contains(err.Error(), "secret"):
			t.Errorf("%s=%q: the error shows the password: %v", name, value, err)
		}
	}
}

// LOG_LEVEL must name a level; an unknown name is an error listing the accepted ones, not
// a silent info.
func TestLogLevelMustBeALevel(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://x@127.0.0.1:1/x")
	for _, ok := range []string{"trace", "debug", "info", "warn", "warning", "error", "fatal", "panic", "DEBUG"} {
		t.Setenv("LOG_LEVEL", ok)
		if _, err := app.LoadConfig(); err != nil {
			t.Errorf("LOG_LEVEL=%s: %v", ok, err)
		}
	}
	t.Setenv("LOG_LEVEL", "verbose")
	if _, err := app.LoadConfig(); err == nil || !strings.Contains(err.Error(), "LOG_LEVEL") || !strings.Contains(err.Error(), "debug") {
		t.Fatalf("LOG_LEVEL=verbose: %v; want an error naming LOG_LEVEL and the levels", err)
	}
}

// Through the binary: serve refuses to start on either, naming the variable.
func TestServeRefusesABadLogLevelOrCanonicalBaseURL(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	for name, value := range map[string]string{"LOG_LEVEL": "verbose", "CANONICAL_BASE_URL": "api.example.com"} {
		t.Run(name, func(t *testing.T) {
			serveRefuses(t, map[string]string{"DATABASE_URL": dbURL, name: value}, nil, name)
		})
	}
}

// kyapi migrate against a database that accepts connections and never answers (a partition, a
// failover) ends with an error naming PostgreSQL, as serve does, instead of waiting forever.
func TestMigrateEndsWhenPostgreSQLNeverAnswers(t *testing.T) {
	silent := silenttest.Addr(t)
	t.Setenv("DATABASE_URL", "postgres://postgres@"+silent+"/kyapi?sslmode=disable")
	// Far longer than the 15 s the service gives PostgreSQL to answer: without that bound the
	// command ends only with this context.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := runMigrate(ctx, nil); err == nil || !strings.Contains(err.Error(), "cannot reach PostgreSQL") {
		t.Fatalf("migrate against a silent server: %v; want \"cannot reach PostgreSQL\"", err)
	}
}

// TLS files that cannot be read are a configuration error before anything starts, naming
// the variables, not a failure of the read API after it said it was listening.
func TestTLSFilesThatCannotBeReadAreRefusedAtConfiguration(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://x@127.0.0.1:1/x")
	t.Setenv("TLS_CERT_FILE", "/nonexistent/cert.pem")
	t.Setenv("TLS_KEY_FILE", "/nonexistent/key.pem")
	if _, err := app.LoadConfig(); err == nil || !strings.Contains(err.Error(), "TLS_CERT_FILE") {
		t.Fatalf("TLS files that do not exist: %v; want an error naming TLS_CERT_FILE", err)
	}
}
