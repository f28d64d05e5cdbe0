package console_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/internal/apptest"
)

// An import of over 8 MiB is spooled to a temporary file while it is read; net/http removes
// it through the request it made, which the console's handler only holds a copy of: every
// large import stayed in the temporary directory, up to 64 MiB each.
func TestALargeConsoleImportLeavesNoTemporaryFileBehind(t *testing.T) {
	tmp := t.TempDir()
	svc := apptest.Start(t, 60)
	c, csrf := signedInConsole(t, svc)
	t.Setenv("TMPDIR", tmp) // mime/multipart spools to os.TempDir, which reads it on each call

	line := `{"record":"nonsense","pad":"` + strings.Repeat("x", 1000) + `"}` + "\n"
	file := []byte(strings.Repeat(line, (10<<20)/len(line)+1)) // over 10 MiB
	if st, page := postImport(t, svc, c, csrf, file); st != http.StatusBadRequest || !strings.Contains(page, "nonsense") {
		t.Fatalf("a file of unknown records: %d, want 400 naming the record kind:\n%s", st, page)
	}
	// The handler removes them before it answers; nothing to wait for.
	left, err := filepath.Glob(filepath.Join(tmp, "multipart-*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range left {
		if st, err := os.Stat(f); err == nil {
			t.Errorf("the upload was left behind after the import was answered: %s (%d bytes)", f, st.Size())
		}
	}
}

// postImport sends file through the console's catalog import form.
func postImport(t *testing.T, svc *apptest.Service, c *http.Client, csrf string, file []byte) (int, string) {
	t.Helper()
	var body bytes.Buffer
	w := multipart.NewWriter(&body)
	if err := w.WriteField("csrf", csrf); err != nil {
		t.Fatal(err)
	}
	fw, err := w.CreateFormFile("file", "places.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write(file)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, svc.AdminURL+"/console/catalog-import", &body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", w.FormDataContentType())
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, readAll(t, resp)
}

// As through the admin API, a place imported through the console is served by the read API
// once the console has reported the import: it waited for nothing, and a detail read right
// after could answer 404 for the place the page had just listed as imported.
func TestAPlaceImportedThroughTheConsoleIsServedOnceThePageAnswers(t *testing.T) {
	svc := apptest.Start(t, 100000)
	id := openAccountViaAdmin(t, svc, "Reader", "reader@example.com")
	if st, b := svc.Admin(t, http.MethodPost, "/admin/accounts/"+id+"/purchases", `{"amount_cents":5000,"payment_ref":"console-visible"}`); st != http.StatusCreated {
		t.Fatalf("purchase: %d %s", st, b)
	}
	st, b := svc.Admin(t, http.MethodPost, "/admin/accounts/"+id+"/keys", "")
	var issued struct {
		Data struct {
			APIKey string `json:"api_key"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(b), &issued); err != nil || st != http.StatusCreated {
		t.Fatalf("key: %d %s", st, b)
	}
	c, csrf := signedInConsole(t, svc)
	for i := range 10 {
		place := fmt.Sprintf("plc_console_%02d", i)
		line := fmt.Sprintf(`{"record":"place","place_id":%q,"name":"Cafe %d","category":"food.cafe","town_slug":"berea","latitude":37.57,"longitude":-84.29}`, place, i)
		if st, page := postImport(t, svc, c, csrf, []byte(line+"\n")); st != http.StatusOK {
			t.Fatalf("import %d: %d\n%s", i, st, page)
		}
		if st, b := svc.Read(t, "/api/data/places/"+place, issued.Data.APIKey); st != http.StatusOK {
			t.Fatalf("import %d: detail right after the page answered: %d %s, want 200", i, st, b)
		}
	}
}

// A bonus grant refused for its credits shows the form again with what was typed, as it does
// the outage id and the reason.
func TestABonusRefusedForItsCreditsKeepsWhatWasTyped(t *testing.T) {
	svc := apptest.Start(t, 60)
	c, csrf := signedInConsole(t, svc)
	resp, err := c.PostForm(svc.AdminURL+"/console/bonus-grants/review", url.Values{"csrf": {csrf},
		"outage_id": {"2026-03-01-db"}, "credits": {"20000000"}, "reason": {"db outage"}})
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(t, resp)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("review of 20,000,000 credits: %d, want 400", resp.StatusCode)
	}
	i := strings.Index(page, `id="bonus_credits"`)
	if i < 0 {
		t.Fatalf("no credits field on the page:\n%s", page)
	}
	if field := page[i : i+strings.Index(page[i:], ">")+1]; !strings.Contains(field, `value="20000000"`) {
		t.Errorf("the credits typed are gone from the form: %s", field)
	}
}

// The search field's maxlength counts characters; so does the server, which refused 150
// accented letters (300 bytes) as "over 200 characters".
func TestASearchOf150AccentedLettersIsNotRefused(t *testing.T) {
	svc := apptest.Start(t, 60)
	c, _ := signedInConsole(t, svc)
	for q, want := range map[string]int{strings.Repeat("é", 150): http.StatusOK, strings.Repeat("é", 201): http.StatusBadRequest} {
		resp, err := c.Get(svc.AdminURL + "/console/accounts?q=" + url.QueryEscape(q))
		if err != nil {
			t.Fatal(err)
		}
		if page := readAll(t, resp); resp.StatusCode != want {
			t.Errorf("a search of %d characters: %d, want %d\n%s", len([]rune(q)), resp.StatusCode, want, page)
		}
	}
}
