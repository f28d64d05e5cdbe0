package domain_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/domain"
)

func TestCheckJSONTextRefusesWhatTheDecoderWouldReplace(t *testing.T) {
	for _, c := range []struct {
		text string
		bad  string // part of the error, "" when the text is fine
	}{
		{`{"ref":"pay-1"}`, ""},
		{`{"ref":"caf\u00e9 \u20ac"}`, ""},
		{`{"ref":"\ud83d\ude00"}`, ""},                 // a pair: one character
		{`{"ref":"\\ud800"}`, ""},                      // an escaped backslash, then text
		{`{"ref":"\"\ud83d\ude00\""}`, ""},             // quotes inside the string
		{"{\"ref\":\"café\"}", ""},                     // UTF-8 as it is
		{`{"\ud800":1}`, "byte 2"},                     // in a key
		{`{"ref":"pay-\ud800"}`, `\ud800`},             // high half alone
		{`{"ref":"pay-\udc00"}`, `\udc00`},             // low half alone
		{`{"ref":"\ud800\u0041"}`, `\ud800`},           // high half, then no low half
		{`{"ref":"\ud800\ud800"}`, `\ud800`},           // two high halves
		{`{"ref":"\DBFF"}`, ""},                        // not a \u escape: the decoder's to refuse
		{`{"ref":"\ud80"}`, ""},                        // too short: the decoder's to refuse
		{"{\"ref\":\"p\xff\"}", "byte 9 is not UTF-8"}, // raw bytes
		{"{\"ref\":\"\xed\xa0\x80\"}", "not UTF-8"},    // a surrogate encoded as UTF-8
	} {
		err := domain.CheckJSONText([]byte(c.text))
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%q: %v, want no error", c.text, err)
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%q: %v, want an error naming %q", c.text, err, c.bad)
		}
	}
}

// Every text CheckJSONText lets through decodes to strings the decoder did not alter: two
// texts that differ in one string decode to different strings.
func TestTextsCheckJSONTextAcceptsDecodeApart(t *testing.T) {
	texts := []string{`"a\ud83d\ude00"`, `"a\ud83d\ude01"`, `"a\u00e9"`, `"a\u00c9"`, `"a\\ud800"`, `"a\\udc00"`}
	seen := map[string]string{}
	for _, text := range texts {
		if err := domain.CheckJSONText([]byte(text)); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		var s string
		if err := json.Unmarshal([]byte(text), &s); err != nil {
			t.Fatal(err)
		}
		if strings.ContainsRune(s, '\uFFFD') {
			t.Errorf("%s decoded to %q, with a replacement character", text, s)
		}
		if other, ok := seen[s]; ok {
			t.Errorf("%s and %s both decode to %q", text, other, s)
		}
		seen[s] = text
	}
}
