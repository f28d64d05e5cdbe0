package domain

import (
	"encoding/json"
	"reflect"
	"testing"
)

// compactFactSeeds are payloads of metered events: the meter's own encodings, and near
// misses the fast decoder must leave to encoding/json.
var compactFactSeeds = []string{
	`{"k":1,"op":"places.detail","paid":["place:plc_3d91fd1f4fa3"],"d":-1,"b":4999872}`,
	`{"k":3,"op":"places.list","paid":["place:a","place:b"],"dedup":["place:c"],"omitted":2,"d":-2,"b":0}`,
	`{"k":2,"op":"places.menu","dedup":["menu:x"],"d":0,"b":17}`,
	` { "b" : 5 , "d" : 0 , "k" : 0 , "paid" : [ ] , "dedup" : [] } `,
	`{"d":-9223372036854775808,"b":9223372036854775807}`,
	`{"d":-0,"b":0,"k":-0}`,
	// encoding/json, not the fast decoder:
	`{"k":1,"op":"places.detail","d":-1}`,
	`{"k":1,"op":"places.detail","b":1}`,
	`{"k":1,"op":"pla\u0063es.detail","d":-1,"b":4}`,
	`{"k":1,"op":"plâces","d":-1,"b":4}`,
	`{"K":1,"op":"places.detail","d":-1,"b":4}`,
	`{"k":1,"k":2,"d":-1,"b":4}`,
	`{"k":1.0,"d":-1,"b":4}`,
	`{"k":1e0,"d":-1,"b":4}`,
	`{"k":01,"d":-1,"b":4}`,
	`{"k":null,"d":-1,"b":4}`,
	`{"paid":null,"d":-1,"b":4}`,
	`{"d":9223372036854775808,"b":4}`,
	`{"d":-1,"b":4}x`,
	`{"d":-1,"b":4,}`,
	`{"d":-1 "b":4}`,
	`{"key_id":"k1","operation":"places.detail","credits_delta":-1,"balance_after":4}`,
	`{}`,
	`[]`,
	``,
}

// TestTheCompactFactDecoderReadsWhatEncodingJSONReads: every payload the fast decoder
// accepts decodes to exactly what encoding/json makes of it, and the meter's own encodings of
// RequestCharged are all accepted (else the fast path would silently never run).
func TestTheCompactFactDecoderReadsWhatEncodingJSONReads(t *testing.T) {
	for _, p := range compactFactSeeds {
		checkCompactFact(t, []byte(p))
	}
	for _, rc := range []RequestCharged{
		{KeyNo: 1, Operation: OpPlaceDetail, Paid: []string{"place:p1"}, CreditsDelta: -1, BalanceAfter: 99},
		{KeyNo: 7, Operation: OpPlaceList, Paid: []string{"place:p1", "place:p2"}, Deduplicated: []string{"place:p3"}, OmittedUnpaid: 4, CreditsDelta: -2, BalanceAfter: 0},
		{KeyNo: 2, Operation: OpPlaceMenu, Deduplicated: []string{"menu:p1"}},
	} {
		b, err := json.Marshal(rc)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := decodeCompactFact(EventRequestCharged, b); !ok {
			t.Errorf("the fast decoder refused the meter's own %s", b)
		}
		checkCompactFact(t, b)
	}
}

func checkCompactFact(t *testing.T, p []byte) {
	t.Helper()
	fast, ok := decodeCompactFact(EventRequestCharged, p)
	if !ok {
		return
	}
	slow, err := decodeAccountFactJSON(EventRequestCharged, p)
	if err != nil {
		t.Fatalf("fast decoder accepted %s, which encoding/json refuses: %v", p, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%s:\nfast %#v\njson %#v", p, fast, slow)
	}
}

func FuzzCompactFact(f *testing.F) {
	for _, p := range compactFactSeeds {
		f.Add([]byte(p))
	}
	f.Fuzz(func(t *testing.T, p []byte) { checkCompactFact(t, p) })
}
