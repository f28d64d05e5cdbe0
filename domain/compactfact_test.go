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
	`{"d":-9223372036854775809,"b":4}`,
	`{"d":18446744073709551616,"b":4}`,
	`{"d":99999999999999999999,"b":4}`,
	`{"d":-,"b":4}`,
	`{"k":1,"op":"a.new.operation","paid":["x"],"d":-1,"b":4}`,
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
	// Borrowing reads the same fact into a list buffer that already holds another event's.
	lists := []string{"place:earlier"}
	borrowed, err := DecodeAccountFactBorrowing(EventRequestCharged, p, &lists)
	if err != nil || !reflect.DeepEqual(borrowed, slow) {
		t.Fatalf("%s borrowing:\n%#v (%v)\njson %#v", p, borrowed, err, slow)
	}
	if lists[0] != "place:earlier" || len(lists) != 1+len(slow.Paid)+len(slow.Deduplicated) {
		t.Fatalf("%s borrowing: the list buffer is %q", p, lists)
	}
}

// TestBorrowingDecodesAChargeWithoutAllocating: the audit decodes millions of charges; with
// its list buffer grown, a charge of a known operation costs no allocation at all.
func TestBorrowingDecodesAChargeWithoutAllocating(t *testing.T) {
	p := []byte(`{"k":3,"op":"places.list","paid":["place:a","place:b"],"dedup":["place:c"],"omitted":2,"d":-2,"b":1234567}`)
	lists := make([]string, 0, 8)
	allocs := testing.AllocsPerRun(100, func() {
		lists = lists[:0]
		f, err := DecodeAccountFactBorrowing(EventRequestCharged, p, &lists)
		if err != nil || len(f.Paid) != 2 || f.Deduplicated[0] != "place:c" || f.Operation != OpPlaceList || f.BalanceAfter != 1234567 {
			t.Fatalf("%#v %v", f, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per decoded charge, want 0", allocs)
	}
}

func FuzzCompactFact(f *testing.F) {
	for _, p := range compactFactSeeds {
		f.Add([]byte(p))
	}
	f.Fuzz(func(t *testing.T, p []byte) { checkCompactFact(t, p) })
}

// Only the first store's verbose charges have a day of their own (AccountFact.Day); a "day" in
// a compact payload is not read, so a charge cannot take itself out of its recorded day's
// dedup claims by naming another.
func TestOnlyAVerboseChargeHasADayOfItsOwn(t *testing.T) {
	for p, want := range map[string]string{
		`{"key_id":"k1","operation":"places.detail","paid":["place:a"],"credits_delta":-1,"balance_after":4,"day":"2026-11-20"}`: "2026-11-20",
		`{"k":1,"op":"places.detail","paid":["place:a"],"d":-1,"b":4,"day":"2026-11-20"}`:                                        "",
		`{"day":"2026-11-20","d":-1,"b":4}`: "",
	} {
		f, err := DecodeAccountFact(EventRequestCharged, []byte(p))
		if err != nil || f.Day != want {
			t.Errorf("%s: day %q (%v), want %q", p, f.Day, err, want)
		}
	}
}
