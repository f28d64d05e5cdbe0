package audit

import (
	"context"

	"github.com/kyapi/kyapi/eventstore"
)

// checkArchivedRanges holds every archived range (event_archives) to what kyapi archive does:
// it detaches and drops every partition of the range it archives, in the transaction that
// records it, so no archived range overlaps a partition of the events table (kyapi restore
// attaches it again and deletes the row). A range that does was recorded by hand: the events
// its boundaries stand for were deleted from a partition that is still there, not archived,
// and no file holds them. Nothing else tells it: the boundaries chain and vouch for their
// balances, so the audit, and a digest taken before the deletion, found the history archived.
func checkArchivedRanges(ctx context.Context, q eventstore.Querier, differ func(string, ...any)) error {
	archives, err := eventstore.Archives(ctx, q)
	if err != nil || len(archives) == 0 {
		return err
	}
	parts, err := eventstore.Partitions(ctx, q)
	if err != nil {
		return err
	}
	for _, a := range archives {
		for _, p := range parts {
			if p.From < a.To && a.From < p.To {
				differ("archived range of positions %d to %d (file %s): it overlaps partition %s of the events table (positions %d to %d), "+
					"which kyapi archive would have dropped: the range was recorded as archived by hand, and the events its boundaries stand for were deleted, not archived",
					a.From, a.To-1, a.FileName, p.Name, p.From, p.To-1)
				break
			}
		}
	}
	return nil
}
