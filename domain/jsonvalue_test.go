package domain

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
)

var jsonValueSeeds = []string{
	`null`, `true`, `false`, `0`, `-0`, `1.5`, `1e-7`, `1e-6`, `123456789e13`, `1e21`, `-1e-100`, `5e-324`,
	`"plain"`, `"a\"b"`, `"<&>"`, `"\u2028"`, `"é"`, `"\u0001"`, "\"\x7f\"",
	`[]`, `{}`, `[1,"x",null,{"b":1,"a":[true]}]`,
	`{"mon":[{"open":"11:00","close":"14:00"}],"tue":[],"Z":1,"a":2,"é":3,"<":4}`,
}

// TestObservedValuesAreWrittenAsEncodingJSONWritesThem: the fast writer of observed values
// gives json.Marshal's bytes for everything decoding JSON can give, so two observations
// compare as they did when json.Marshal wrote them.
func TestObservedValuesAreWrittenAsEncodingJSONWritesThem(t *testing.T) {
	for _, s := range jsonValueSeeds {
		checkJSONValue(t, []byte(s))
	}
	if _, ok := appendJSONValue(nil, map[string]any{"a": []any{1.5, "x"}}); !ok {
		t.Fatal("the fast writer refused a decoded object")
	}
	if _, ok := appendJSONValue(nil, 3); ok {
		t.Fatal("the fast writer took an int, which decoding JSON never gives")
	}
}

func checkJSONValue(t *testing.T, doc []byte) {
	t.Helper()
	var v any
	if json.Unmarshal(doc, &v) != nil {
		return
	}
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := appendJSONValue(nil, v)
	if !ok {
		t.Fatalf("%s: refused", doc)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s:\ngot  %s\nwant %s", doc, got, want)
	}
}

func FuzzObservedValue(f *testing.F) {
	for _, s := range jsonValueSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) { checkJSONValue(t, doc) })
}

var jsonNumberSeeds = []string{`0`, `-0`, `0.000`, `1`, `1.0`, `10e-1`, `1E+0`, `-1.50`, `123456789e13`, `1e21`, `1e20`,
	`0.000001`, `0.0000001`, `1e-7`, `12345678901234567890`, `12345678901234567891`, `5e-324`, `1e400`, `-2.5e-400`,
	`100e-2`, `0.01e2`, `1e0000000000000000000000001`, `7e1000000000000000000`}

// TestAnObservedNumberIsWrittenAsItsFloat64WhenThatIsExact: a number of at most 15
// significant digits in float64's range reads back from float64 exactly, so its exact form
// is the one encoding/json gives the float64: observations compare as they did before they
// kept every digit.
func TestAnObservedNumberIsWrittenAsItsFloat64WhenThatIsExact(t *testing.T) {
	for _, s := range jsonNumberSeeds {
		checkNumberAsFloat(t, s)
	}
}

func checkNumberAsFloat(t *testing.T, lit string) {
	t.Helper()
	var r big.Rat
	if !json.Valid([]byte(lit)) || !isNumberLiteral(lit) || len(lit) > 40 {
		return
	}
	if _, ok := r.SetString(lit); !ok {
		return
	}
	f, exact := r.Float64()
	if !exact || f != 0 && (math.Abs(f) < 1e-300 || math.Abs(f) > 1e300) {
		return // not float64's exact value, or where the float64 form has fewer digits
	}
	want, _ := appendJSONFloat(nil, f)
	if f == 0 {
		want = []byte("0") // -0 is 0
	}
	if got := appendJSONNumber(nil, lit); !bytes.Equal(got, want) {
		t.Fatalf("%s: %s, the float64 %s", lit, got, want)
	}
}

// TestTwoObservedNumbersAreWrittenAlikeExactlyWhenTheyAreEqual, by their exact values.
func TestTwoObservedNumbersAreWrittenAlikeExactlyWhenTheyAreEqual(t *testing.T) {
	for _, a := range jsonNumberSeeds {
		for _, b := range jsonNumberSeeds {
			checkNumbersAlike(t, a, b)
		}
	}
}

func checkNumbersAlike(t *testing.T, a, b string) {
	t.Helper()
	if !isNumberLiteral(a) || !isNumberLiteral(b) || len(a) > 60 || len(b) > 60 {
		return
	}
	var x, y big.Rat
	if !exponentSmall(a) || !exponentSmall(b) {
		return // big.Rat would spend without bound; such literals are kept as written
	}
	if _, ok := x.SetString(a); !ok {
		t.Fatalf("big.Rat refused %s", a)
	}
	if _, ok := y.SetString(b); !ok {
		t.Fatalf("big.Rat refused %s", b)
	}
	ga, gb := appendJSONNumber(nil, a), appendJSONNumber(nil, b)
	if equal := x.Cmp(&y) == 0; equal != bytes.Equal(ga, gb) {
		t.Fatalf("%s and %s (equal: %v) written %s and %s", a, b, equal, ga, gb)
	}
}

func isNumberLiteral(s string) bool {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil || d.More() {
		return false
	}
	n, ok := v.(json.Number)
	return ok && string(n) == s
}

func exponentSmall(s string) bool {
	i := strings.IndexAny(s, "eE")
	if i < 0 {
		return true
	}
	e, err := strconv.Atoi(s[i+1:])
	return err == nil && e > -5000 && e < 5000
}

func FuzzObservedNumbers(f *testing.F) {
	for i, s := range jsonNumberSeeds {
		f.Add(s, jsonNumberSeeds[(i+7)%len(jsonNumberSeeds)])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		checkNumberAsFloat(t, a)
		checkNumbersAlike(t, a, b)
	})
}

// An observed number whose exponent has more than 18 digits is refused at import, naming
// it: its exact value, by which observations are compared, would cost without bound.
func TestAnObservedNumberWithAHugeExponentIsRefused(t *testing.T) {
	for _, v := range []string{`1e1000000000000000000`, `[1, {"a": -2.5E+0000000000000000000000000000001234567890123456789}]`} {
		line := `{"record":"place","place_id":"p1","name":"P","category":"food","sources":{"rating":[{"source":"a","value":` + v + `,"observed_at":"2026-01-01T00:00:00Z"}]}}`
		_, err := ParseCatalog(strings.NewReader(line + "\n"))
		var ie *ImportError
		if !errors.As(err, &ie) || ie.Field != "sources.rating[0].value" || !strings.Contains(ie.Message, "exponent") {
			t.Errorf("%s: %v, want refused naming sources.rating[0].value and its exponent", v, err)
		}
	}
	line := `{"record":"place","place_id":"p1","name":"P","category":"food","sources":{"rating":[{"source":"a","value":1e000000000000000000000000000400,"observed_at":"2026-01-01T00:00:00Z"}]}}`
	if _, err := ParseCatalog(strings.NewReader(line + "\n")); err != nil {
		t.Errorf("an exponent of 3 digits written with leading zeros: %v", err)
	}
}
