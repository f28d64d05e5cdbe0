package audit

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
)

// chunkRow is one row of claim_chunks.
type chunkRow struct {
	through, position int64
	hashes            []byte
}

// checkClaimChunks checks the saved dedup claims (claim_chunks: the days not yet deleted, today
// and yesterday, and any day whose charges are not archived) against the charges they save. A meter starting on an account reads the day's
// chunks and then only the charges after the last one (after its `through` version and its
// `position`), so that a chunk missing a claim makes the resource be charged again that day; a
// claim of nothing paid serves a resource free; a `through` or `position` moved on skips
// charges, whose resources are then charged again. Each of those is a difference, found before
// any meter acts on it. (A chunk deleted changes nothing the meter decides: it reads the charges
// again.) scope limits it to one stream (0: every stream).
func (a *auditor) checkClaimChunks(ctx context.Context, tx pgx.Tx, scope int32) error {
	rows, err := tx.Query(ctx, `SELECT c.stream_no, s.stream_id, s.version, to_char(c.day, 'YYYY-MM-DD'), c.through, c.position, c.hashes
		FROM claim_chunks c JOIN streams s USING (stream_no)
		WHERE $1 = 0 OR c.stream_no = $1 ORDER BY c.stream_no, c.day, c.through`, scope)
	if err != nil {
		return err
	}
	type group struct {
		stream  string
		head    int64
		day     string
		entries []chunkRow
	}
	var groups []*group
	var no, last int32
	var stream, day string
	var head int64
	var c chunkRow
	if _, err := pgx.ForEachRow(rows, []any{&no, &stream, &head, &day, &c.through, &c.position, &c.hashes}, func() error {
		if len(groups) == 0 || no != last || groups[len(groups)-1].day != day {
			groups = append(groups, &group{stream: stream, head: head, day: day})
			last = no
		}
		g := groups[len(groups)-1]
		g.entries = append(g.entries, chunkRow{c.through, c.position, append([]byte(nil), c.hashes...)})
		return nil
	}); err != nil {
		return err
	}
	for _, g := range groups {
		if err := a.checkDayChunks(ctx, tx, g.stream, g.head, g.day, g.entries); err != nil {
			return err
		}
	}
	return nil
}

// checkDayChunks checks one stream's chunks of one day, in `through` order.
func (a *auditor) checkDayChunks(ctx context.Context, tx pgx.Tx, stream string, head int64, day string, chunks []chunkRow) error {
	account := domain.AccountOfStream(stream)
	from, err := time.Parse(time.DateOnly, day)
	if err != nil {
		return err
	}
	// A day some of whose charges are archived (its chunks outlive them until maintenance
	// deletes them) is one no meter charges on any more: archive refuses today's and
	// yesterday's events. Its chunks are not checked.
	if b, ok, err := eventstore.BoundaryOf(ctx, tx, stream); err != nil {
		return err
	} else if ok && !b.At.Before(from) {
		return nil
	}
	through, position := int64(0), int64(0)
	for _, c := range chunks {
		through, position = max(through, c.through), max(position, c.position)
	}
	if through > head {
		a.differ("account %s: claim chunk of %s through v%d, past the stream's head v%d: a meter would skip the charges up to it",
			account, day, through, head)
	}
	// The day's charges, in order: the version each paid its resources at.
	paidAt := map[int64]int64{} // claim -> the version that first paid it
	type charge struct{ version, position int64 }
	var after []charge // charges after `through`
	err = eventstore.ReadStreamWindow(ctx, tx, stream, from, from.AddDate(0, 0, 1), func(e eventstore.Event) error {
		if e.Type != domain.EventRequestCharged {
			return nil
		}
		f, err := domain.DecodeAccountFact(e.Type, e.Payload)
		if err != nil {
			return nil // named by the stream's own reading
		}
		if f.Day != "" && f.Day != day {
			return nil // a first-store charge of another day claims nothing on this one
		}
		if e.Version > through {
			after = append(after, charge{e.Version, e.Position})
		}
		for _, r := range f.Paid {
			if _, ok := paidAt[domain.ResourceHash(r)]; !ok {
				paidAt[domain.ResourceHash(r)] = e.Version
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, ch := range after {
		if ch.position <= position {
			a.differ("account %s: claim chunks of %s end at position %d, past the charge v%d (position %d) after their last version v%d: a meter would skip it",
				account, day, position, ch.version, ch.position, through)
			break
		}
	}
	saved := map[int64]bool{}
	for _, c := range chunks {
		forged := 0
		for i := 0; i+8 <= len(c.hashes); i += 8 {
			h := int64(binary.BigEndian.Uint64(c.hashes[i:]))
			saved[h] = true
			if v, ok := paidAt[h]; !ok || v > c.through {
				forged++
			}
		}
		if len(c.hashes)%8 != 0 {
			a.differ("account %s: claim chunk of %s through v%d is %d bytes, not a whole number of 8-byte claims", account, day, c.through, len(c.hashes))
		}
		if forged > 0 {
			a.differ("account %s: claim chunk of %s through v%d holds %s: a meter would serve them free that day",
				account, day, c.through, plural(forged, "claim of no resource paid by then", "claims of no resource paid by then"))
		}
	}
	missing := 0
	for h, v := range paidAt {
		if v <= through && !saved[h] {
			missing++
		}
	}
	if missing > 0 {
		a.differ("account %s: claim chunks of %s through v%d lack %s paid by then: a meter would charge them again that day",
			account, day, through, plural(missing, "resource", "resources"))
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
