package domain

import (
	"bytes"
	"encoding/json"
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
