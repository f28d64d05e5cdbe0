package domain_test

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kyapi/kyapi/domain"
)

// A metered request's event is encoded by RequestCharged.AppendJSON, not json.Marshal: the
// bytes are hashed into the stream's chain and read back by every decoder, so they must be
// json.Marshal's, byte for byte, whatever the strings hold.
func TestRequestChargedAppendsWhatJSONMarshalWrites(t *testing.T) {
	odd := []string{"", "place:plc_f7e47f713586", `quote " and \ backslash`, "<tag> & amp", "caf\u00e9 \U0001F354",
		"tab\tnew\nline\x00nul\x1f", "bad utf-8 \xff\xfe", "\u2028\u2029 separators", "\x7f del", "event:evt_1"}
	r := rand.New(rand.NewPCG(9, 9))
	list := func() []string {
		switch r.IntN(4) {
		case 0:
			return nil
		case 1:
			return []string{} // omitempty leaves an empty list out too
		}
		l := make([]string, 1+r.IntN(4))
		for i := range l {
			l[i] = odd[r.IntN(len(odd))]
		}
		return l
	}
	ints := []int64{0, 1, -1, 5, -5, 4999999, math.MaxInt64, math.MinInt64}
	ops := []domain.Operation{domain.OpPlaceDetail, "places.list", domain.Operation(odd[r.IntN(len(odd))]), ""}
	for i := range 5000 {
		c := domain.RequestCharged{
			KeyNo:         int(ints[r.IntN(len(ints))]),
			Operation:     ops[i%len(ops)],
			Paid:          list(),
			Deduplicated:  list(),
			OmittedUnpaid: int(ints[r.IntN(len(ints))]),
			CreditsDelta:  ints[r.IntN(len(ints))],
			BalanceAfter:  ints[r.IntN(len(ints))],
		}
		if i%len(ops) == 2 {
			c.Operation = domain.Operation(odd[r.IntN(len(odd))])
		}
		want, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.AppendJSON([]byte("prefix")); !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("%+v:\nAppendJSON %s\njson.Marshal    %s", c, got, want)
		}
	}
}
