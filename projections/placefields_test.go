package projections

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kyapi/kyapi/demodata"
	"github.com/kyapi/kyapi/domain"
)

// sameAsUnmarshal fails t unless decodeIndexedFields reads b exactly as json.Unmarshal does:
// the same fields, or an error where it gives one.
func sameAsUnmarshal(t *testing.T, b []byte) {
	t.Helper()
	var want indexedFields
	wantErr := json.Unmarshal(b, &want)
	got, err := decodeIndexedFields(b)
	if (err != nil) != (wantErr != nil) || !reflect.DeepEqual(got, want) && wantErr == nil {
		t.Fatalf("%s\n decoded %s (error %v)\n json.Unmarshal %s (error %v)", b, show(got), err, show(want), wantErr)
	}
}

func show(f indexedFields) string {
	b, _ := json.Marshal(f)
	return string(b)
}

// Every place of the demo catalog, as the import stores it, reads as json.Unmarshal reads it,
// and without falling back to it.
func TestDemoPlacePayloadsDecodeAsJSONUnmarshalDoes(t *testing.T) {
	for _, b := range demoPlacePayloads(t, 3000) {
		sameAsUnmarshal(t, b)
		if _, ok := scanIndexedFields(b); !ok {
			t.Fatalf("a demo place fell back to json.Unmarshal: %s", b)
		}
	}
}

// demoPlacePayloads are the PlaceImported payloads of n demo places, as the import stores them.
func demoPlacePayloads(tb testing.TB, n int) [][]byte {
	tb.Helper()
	var buf bytes.Buffer
	if _, err := demodata.Write(&buf, demodata.Config{Places: n, Today: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)}); err != nil {
		tb.Fatal(err)
	}
	cat, err := domain.ParseCatalog(&buf)
	if err != nil {
		tb.Fatal(err)
	}
	var payloads [][]byte
	for _, p := range cat.Places {
		b, err := json.Marshal(p)
		if err != nil {
			tb.Fatal(err)
		}
		payloads = append(payloads, b)
	}
	return payloads
}

// The cases the scan must not read differently from encoding/json: keys it matches whatever
// their case, escapes, duplicate keys, nulls, numbers strconv reads and JSON does not, values
// of the wrong kind, text around or instead of an object.
func TestTrickyPayloadsDecodeAsJSONUnmarshalDoes(t *testing.T) {
	for _, b := range []string{
		`{"place_id":"p1","name":"A","category":"diner","town_slug":"lex","latitude":38.1,"longitude":-84.5,"rating_count":12,"description":"d","seo_description":null}`,
		`{"Name":"capital","name":"lower"}`, `{"name":"lower","NAME":"capital"}`, `{"nam\u0065":"escaped key"}`,
		`{"name":"tab\there"}`, `{"name":"quote \" inside"}`, `{"name":"\u00e9t\u00e9"}`, `{"name":"\ud83d\ude00"}`,
		`{"name":"a","name":"b"}`, `{"name":"a","name":null}`, `{"town_slug":"x","town_slug":null}`,
		`{"rating_count":1.0}`, `{"rating_count":1e2}`, `{"rating_count":-0}`, `{"rating_count":99999999999999999999}`,
		`{"latitude":1e400}`, `{"latitude":-0.0}`, `{"latitude":1E-2}`, `{"latitude":"1"}`, `{"rating_count":"1"}`,
		`{"name":1}`, `{"name":true}`, `{"name":["a"]}`, `{"description":{"a":1}}`, `{"latitude":null,"rating_count":null}`,
		`{"menu":[{"name":"not me","price":"}]"}],"name":"me","reviews":{"x":"\"{["}}`,
		`{"sources":["a\\","b"],"name":"after an escaped backslash"}`,
		` { "name" : "spaces" , "category" : "x" } `, "{\n\t\"name\":\r\n\"ws\"}",
		`{}`, `null`, `[]`, `"x"`, `{"name":"a"} trailing`, `{"other":,"name":"a"}`, `{"name":"a"`, `{"name" "a"}`, `{"name":"a",}`,
		`{"place_id":"k\u212aelvin"}`, `{"ſame":"long s"}`, `{"place_ıd":"dotless"}`, "{\"name\":\"\xff\"}",
		`{"name":"` + strings.Repeat("x", 5000) + `"}`,
	} {
		sameAsUnmarshal(t, []byte(b))
	}
}

// Payloads built at random from the pieces above, as a property: whatever the order, nesting
// and spelling of the fields, both read the same.
func TestRandomPayloadsDecodeAsJSONUnmarshalDoes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	keys := []string{"place_id", "name", "category", "town_slug", "latitude", "longitude", "rating_count", "description",
		"seo_description", "menu", "Name", "RATING_COUNT", `des\u0063ription`, "other"}
	values := []string{`"plain"`, `"esc\"aped"`, `"\u00e9"`, `null`, `12`, `-3.5`, `1e3`, `0`, `true`, `[1,"]",{"a":"}"}]`,
		`{"k":[{"x":"\\"}]}`, `""`, `"two words"`, `01`, `.5`}
	for range 20000 {
		var b strings.Builder
		b.WriteString("{")
		for i := range r.IntN(8) {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "%q:%s", keys[r.IntN(len(keys))], values[r.IntN(len(values))])
		}
		b.WriteString("}")
		// %q escapes a backslash in a key: put the raw escape back for the escaped-key case.
		text := []byte(strings.ReplaceAll(b.String(), `\\u0063`, `\u0063`))
		if !json.Valid(text) {
			// The values of other fields are not checked (PostgreSQL did): only text that is
			// JSON is read the same.
			_, _ = decodeIndexedFields(text)
			continue
		}
		sameAsUnmarshal(t, text)
	}
}

// BenchmarkDecodePlaceFields reads the place index's fields of demo places: the scan against
// json.Unmarshal, side by side.
func BenchmarkDecodePlaceFields(b *testing.B) {
	payloads := demoPlacePayloads(b, 2000)
	b.Run("scan", func(b *testing.B) {
		for i := range b.N {
			if _, err := decodeIndexedFields(payloads[i%len(payloads)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		for i := range b.N {
			var f indexedFields
			if err := json.Unmarshal(payloads[i%len(payloads)], &f); err != nil {
				b.Fatal(err)
			}
		}
	})
}
