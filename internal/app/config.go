package app

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"

	"github.com/kyapi/kyapi/commands"
	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/ratelimit"
)

// Config is read once, from the environment, at start (README, "Configuration").
type Config struct {
	DatabaseURL string
	ReadAddr    string
	AdminAddr   string
	// AdminAddrDefault is true when ADMIN_ADDR is unset: a second serve process on the machine
	// then finds the default address taken and serves without the admin API (Serve).
	AdminAddrDefault bool
	AdminToken       string
	ElasticsearchURL string
	DataDir          string
	CanonicalBaseURL string
	RateLimit        int
	LogLevel         string
	TLSCertFile      string
	TLSKeyFile       string
	// AuditSigningKey is the file of the Ed25519 key that signs digests (kyapi digest; serve
	// writes one every hour when it is set).
	AuditSigningKey string

	// RedisURL, when set, is the Redis in which every process counts each key's requests
	// (ratelimit.Shared); unset, they count them in the database (ratelimit.Postgres).
	// RedisTimeout bounds each call to either (REDIS_TIMEOUT, default 1s): past it the request
	// is counted in the process.
	RedisURL     string
	RedisTimeout time.Duration

	// MeterMaxClaims bounds the dedup claims of the day the meter keeps in memory
	// (METER_MAX_CLAIMS, default commands.DefaultMaxClaims; docs/operations.md, "The maintenance
	// loop").
	MeterMaxClaims int
}

// LoadConfig reads the configuration from the environment.
func LoadConfig() (Config, error) {
	c := Config{
		DatabaseURL:      os.Getenv("DATABASE_URL"),
		ReadAddr:         envOr("READ_ADDR", ":8080"),
		AdminAddr:        envOr("ADMIN_ADDR", "127.0.0.1:8081"),
		AdminToken:       os.Getenv("ADMIN_TOKEN"),
		ElasticsearchURL: os.Getenv("ELASTICSEARCH_URL"),
		RedisURL:         os.Getenv("REDIS_URL"),
		DataDir:          envOr("DATA_DIR", "./data"),
		CanonicalBaseURL: envOr("CANONICAL_BASE_URL", "http://localhost:8080"),
		LogLevel:         envOr("LOG_LEVEL", "info"),
		TLSCertFile:      os.Getenv("TLS_CERT_FILE"),
		TLSKeyFile:       os.Getenv("TLS_KEY_FILE"),
		AuditSigningKey:  os.Getenv("AUDIT_SIGNING_KEY"),
	}
	if c.DatabaseURL == "" {
		return c, fmt.Errorf("DATABASE_URL is not set")
	}
	// A token that cannot be sent in a header (HTTP trims a value's white space; a control
	// character has no place in one) would leave every admin call 401 without a word.
	if strings.TrimSpace(c.AdminToken) != c.AdminToken || strings.ContainsFunc(c.AdminToken, notInAHeader) {
		return c, fmt.Errorf("ADMIN_TOKEN must not begin or end with white space nor hold a control character other than a tab (a secret file's trailing newline?): such a token cannot be sent in an Authorization header")
	}
	c.AdminAddrDefault = os.Getenv("ADMIN_ADDR") == ""
	// Checked here, before serve opens anything: a bad address would otherwise show only once
	// the projections had caught up, in the listener's words.
	for _, a := range []struct{ name, addr string }{{"READ_ADDR", c.ReadAddr}, {"ADMIN_ADDR", c.AdminAddr}} {
		if _, port, err := net.SplitHostPort(a.addr); err != nil || port == "" {
			return c, fmt.Errorf("%s must be host:port or :port (such as :8080 or 127.0.0.1:8081), got %q", a.name, a.addr)
		} else if _, err := net.LookupPort("tcp", port); err != nil {
			return c, fmt.Errorf("%s: port %q is not a port (0 to 65535, or a service name)", a.name, port)
		}
	}
	rl := envOr("RATE_LIMIT_PER_MINUTE", "60")
	n, err := strconv.Atoi(rl)
	if err != nil || n < 1 {
		return c, fmt.Errorf("RATE_LIMIT_PER_MINUTE must be a positive integer, got %q", rl)
	}
	c.RateLimit = n
	mc := envOr("METER_MAX_CLAIMS", strconv.Itoa(commands.DefaultMaxClaims))
	if c.MeterMaxClaims, err = strconv.Atoi(mc); err != nil || c.MeterMaxClaims < 1 {
		return c, fmt.Errorf("METER_MAX_CLAIMS must be a positive integer (claims held in memory, 11 to 21 bytes each), got %q", mc)
	}
	rt := envOr("REDIS_TIMEOUT", ratelimit.DefaultRedisTimeout.String())
	if c.RedisTimeout, err = time.ParseDuration(rt); err != nil || c.RedisTimeout <= 0 {
		return c, fmt.Errorf("REDIS_TIMEOUT must be a positive duration such as 1s or 250ms, got %q", rt)
	}
	if c.CanonicalBaseURL, err = canonicalBaseURL(c.CanonicalBaseURL); err != nil {
		return c, err
	}
	if c.ElasticsearchURL != "" {
		if err := checkElasticsearchURL(c.ElasticsearchURL); err != nil {
			return c, err
		}
	}
	if c.RedisURL != "" {
		if err := checkRedisURL(c.RedisURL); err != nil {
			return c, err
		}
	}
	if _, err := logrus.ParseLevel(c.LogLevel); err != nil {
		return c, fmt.Errorf("LOG_LEVEL must be one of %s, got %q", strings.Join(LogLevels, ", "), c.LogLevel)
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return c, fmt.Errorf("TLS_CERT_FILE and TLS_KEY_FILE must be set together")
	}
	// Read now, not when the read API starts listening: a missing or mismatched file is a
	// configuration error, said before anything starts.
	if c.TLSCertFile != "" {
		if _, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile); err != nil {
			return c, fmt.Errorf("TLS_CERT_FILE and TLS_KEY_FILE must be a PEM certificate and its key: %w", err)
		}
	}
	return c, nil
}

// LogLevels are the names LOG_LEVEL takes (logrus's, in any case; "warning" is "warn").
var LogLevels = []string{"trace", "debug", "info", "warn", "error", "fatal", "panic"}

// checkListenAddrs refuses a read API and an admin API that would listen on one address: the
// admin API listens on its own, never on the public one (docs/api.md). Only serve opening
// both asks; a command that listens on neither, or a serve running one of them, takes any.
func checkListenAddrs(cfg Config) error {
	if overlap(cfg.ReadAddr, cfg.AdminAddr) {
		return fmt.Errorf("READ_ADDR %q and ADMIN_ADDR %q are the same address: the admin API needs one of its own", cfg.ReadAddr, cfg.AdminAddr)
	}
	return nil
}

// overlap reports whether two listen addresses (checked host:port) take the same port on a
// common interface: the same host, hosts listened on at the same address (localhost and
// 127.0.0.1), or either one every interface. Port 0 takes any free port.
func overlap(a, b string) bool {
	// A host name is listened on at one of its addresses, the one ResolveTCPAddr picks.
	ra, errA := net.ResolveTCPAddr("tcp", a)
	rb, errB := net.ResolveTCPAddr("tcp", b)
	if errA != nil || errB != nil || ra.Port == 0 || ra.Port != rb.Port {
		return false // an address that does not resolve fails at listening, naming its host
	}
	every := func(ip net.IP) bool { return ip == nil || ip.IsUnspecified() }
	return every(ra.IP) || every(rb.IP) || ra.IP.Equal(rb.IP)
}

// WildcardHost reports whether a listen address's host is every interface ("", 0.0.0.0, ::).
func WildcardHost(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }

// canonicalBaseURL checks CANONICAL_BASE_URL: an absolute http or https URL with a host,
// optionally a path, and nothing else. Trailing slashes are dropped, so that
// {base}/places/{id} never holds "//".
func canonicalBaseURL(v string) (string, error) {
	u, err := url.Parse(v)
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("CANONICAL_BASE_URL must be an absolute http or https URL such as https://api.example.com (%s), got %q", why, v)
	}
	if why := httpURLProblem(u, err); why != "" {
		return bad(why)
	}
	switch {
	case u.User != nil:
		return bad("it must not hold a user name or password")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.ContainsAny(v, "?#"):
		return bad("it must not hold a query or a fragment")
	}
	// Every canonical_url is {base}/places/{id}, served as a URI: a base not written as one is
	// refused, with the form to write (the import writes a website so, domain.WebURI).
	if uri, err := domain.WebURI(v); err != nil {
		return bad(err.Error())
	} else if uri != v {
		return bad("not written as a URI: write it " + uri)
	}
	return strings.TrimRight(v, "/"), nil
}

// notInAHeader tells a character an HTTP field value cannot hold: a control character other than
// a tab.
func notInAHeader(r rune) bool { return unicode.IsControl(r) && r != '\t' }

// checkElasticsearchURL checks ELASTICSEARCH_URL: an http or https URL with a host (and
// optionally credentials and a path). The error never repeats a password it holds.
func checkElasticsearchURL(v string) error {
	u, shown, err := parseRedacted(v)
	bad := func(why string) error {
		return fmt.Errorf("ELASTICSEARCH_URL must be an http or https URL such as http://localhost:9200 (%s), got %s", why, shown)
	}
	if why := httpURLProblem(u, err); why != "" {
		return bad(why)
	}
	return nil
}

// parseRedacted parses a URL setting and says how an error may show it: quoted, its password
// replaced, or not at all when it does not parse (url.Parse's error would repeat it whole).
func parseRedacted(v string) (u *url.URL, shown string, err error) {
	if u, err = url.Parse(v); err != nil {
		return u, "(not shown: it does not parse)", err
	}
	return u, fmt.Sprintf("%q", u.Redacted()), nil
}

// httpURLProblem says what keeps a parsed URL (and its parse error) from being an absolute
// http or https URL with a host; "" when nothing does.
func httpURLProblem(u *url.URL, err error) string {
	switch {
	case err != nil:
		return "it does not parse"
	case u.Scheme != "http" && u.Scheme != "https":
		return "it needs the scheme http:// or https://"
	case u.Host == "" || u.Hostname() == "":
		return "it names no host"
	}
	return ""
}

// checkRedisURL checks REDIS_URL as the shared rate limiter will parse it (redis://,
// rediss://, or unix:// for a socket). The error never repeats a password it holds.
func checkRedisURL(v string) error {
	u, shown, err := parseRedacted(v)
	bad := func(why string) error {
		return fmt.Errorf("REDIS_URL must be a redis://, rediss:// or unix:// URL such as redis://localhost:6379/0 (%s), got %s", why, shown)
	}
	switch {
	case err != nil:
		return bad("it does not parse")
	case u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix":
		return bad("it needs the scheme redis://, rediss:// or unix://")
	}
	if _, err := redis.ParseURL(v); err != nil {
		// go-redis names the scheme, database or option it refuses, never the password.
		return bad(strings.TrimPrefix(err.Error(), "redis: "))
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
