package e2e

import (
	"net/http"
	"os/exec"
	"regexp"
	"testing"

	"github.com/kyapi/kyapi/internal/pgtest"
)

// make run is `kyapi migrate`, `kyapi demo-data`, `kyapi serve`; this is the same sequence
// with a small catalog, and the printed curl line is run as printed.
func TestTheCurlLinePrintedByDemoDataAnswers200(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	addr := freeAddr(t)
	base := "http://" + addr
	cmd := exec.Command(kyapiBinary(t), "demo-data", "-places", "300")
	// demo-data names where serve listens with the same environment (READ_ADDR), as make run
	// gives both; not the catalog's canonical URL base.
	cmd.Env = childEnv(map[string]string{"DATABASE_URL": dbURL, "DATA_DIR": t.TempDir(), "READ_ADDR": addr,
		"CANONICAL_BASE_URL": "https://api.example.com"})
	out, err := cmd.CombinedOutput()
	noRace(t, "kyapi demo-data", string(out))
	if err != nil {
		t.Fatalf("kyapi demo-data: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`curl -H "Authorization: Bearer (svc_live_[A-Za-z0-9]+)" "([^"]+)"`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("demo-data printed no curl line:\n%s", out)
	}
	key, url := string(m[1]), string(m[2])

	waitEventsVisible(t, dbURL)
	startServe(t, serveConfig{Name: "demo", DatabaseURL: dbURL, Env: map[string]string{"READ_ADDR": addr, "CANONICAL_BASE_URL": base}})
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the printed curl line answered %d", resp.StatusCode)
	}

}
