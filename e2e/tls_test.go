package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/internal/pgtest"
)

// selfSignedCert writes a certificate and key for 127.0.0.1 into dir and returns their
// paths and a pool that trusts the certificate.
func selfSignedCert(t *testing.T, dir string) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "kyapi e2e"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots
}

func TestReadAPIServesTLSWithTheConfiguredCertificate(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	places := importCatalog(t, dbURL)
	certFile, keyFile, roots := selfSignedCert(t, t.TempDir())
	trusting := &http.Client{Timeout: clientTimeout, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	s := startServe(t, serveConfig{
		Name: "tls", DatabaseURL: dbURL, AdminToken: randomToken("admin-"), ReadClient: trusting,
		Env: map[string]string{"TLS_CERT_FILE": certFile, "TLS_KEY_FILE": keyFile},
	})
	if !strings.HasPrefix(s.ReadURL, "https://") {
		t.Fatalf("read URL %s is not https", s.ReadURL)
	}
	if !strings.Contains(s.Output(), `"tls":true`) {
		t.Errorf("no listening line with tls true in the output")
	}

	// startServe has already seen GET /healthz answer 200 over https; check the certificate.
	resp, err := trusting.Get(s.ReadURL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		t.Fatalf("GET /healthz over https: status %d, TLS state %v", resp.StatusCode, resp.TLS)
	}
	// The trusting client verified the chain against that one certificate only.
	if cn := resp.TLS.PeerCertificates[0].Subject.CommonName; cn != "kyapi e2e" {
		t.Errorf("the server presented a certificate for %q, not the configured one", cn)
	}

	_, key := s.openAccount("Secure", 500) // the admin API stays plain HTTP on loopback
	m := s.readOK("/api/data/places/"+places[0].ID, key.APIKey)
	if m.Meta.CreditsUsed != 1 {
		t.Errorf("metered request over https: credits_used %d, want 1", m.Meta.CreditsUsed)
	}

	// A client that does not trust the certificate is refused by its own TLS check.
	if _, err := (&http.Client{Timeout: clientTimeout}).Get(s.ReadURL + "/healthz"); err == nil {
		t.Error("a client without the certificate in its roots completed a request")
	}
	// Plain HTTP on the TLS port gets no API answer.
	plain := "http://" + strings.TrimPrefix(s.ReadURL, "https://")
	if r, err := (&http.Client{Timeout: clientTimeout}).Get(plain + "/healthz"); err == nil {
		r.Body.Close()
		if r.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP on the TLS port answered 200")
		}
	}
}
