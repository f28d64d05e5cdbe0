package eventstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrCommitOutcomeUnknown means the connection was lost after COMMIT was sent and it could not
// be found out in time whether the transaction committed: what it wrote may be saved or not.
var ErrCommitOutcomeUnknown = errors.New("the service lost contact with its database while saving this change " +
	"and could not find out whether it was saved: read it back before trying again " +
	"(a purchase sent again with the same payment_ref is never credited twice)")

// commitOutcomeWait bounds how long WithTx looks for the outcome of a commit whose answer was
// lost before it returns ErrCommitOutcomeUnknown. A variable for the tests.
var commitOutcomeWait = 15 * time.Second

// Backend names the server process behind a connection: its pid and the time it started (a
// pid alone may be taken again by a later process once this one has ended).
type Backend struct {
	PID   uint32
	Start time.Time
}

// BackendOf returns the backend of pc, read once per connection and kept with it.
func BackendOf(ctx context.Context, pc *pgx.Conn) (Backend, error) {
	data := pc.PgConn().CustomData()
	if b, ok := data["kyapi.backend"].(Backend); ok {
		return b, nil
	}
	b := Backend{PID: pc.PgConn().PID()}
	if err := pc.QueryRow(ctx, `SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()`).Scan(&b.Start); err != nil {
		return b, err
	}
	data["kyapi.backend"] = b
	return b, nil
}

// End ends the backend if it still runs, on connection c, and tells whether it did.
func (be Backend) End(ctx context.Context, c *pgx.Conn) (running bool, err error) {
	err = c.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) > 0 FROM pg_stat_activity WHERE pid = $1 AND backend_start = $2`,
		int64(be.PID), be.Start).Scan(&running)
	return running, err
}

// FreshConn opens a connection of its own to pool's database, not one of the pool's: after a
// connection was lost the pool's idle ones may be as dead (a partition leaves them all silent).
func FreshConn(ctx context.Context, pool *pgxpool.Pool) (*pgx.Conn, error) {
	return pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
}

// runTx runs fn in one transaction and commits it. When the connection is lost after COMMIT
// was sent, the transaction may have committed or not, and only the database knows: runTx ends
// the old session if it still runs and asks the transaction's status on a connection of its
// own, so that a commit that happened is a success and one that did not is the error. Only if
// that cannot be found out within commitOutcomeWait is the answer ErrCommitOutcomeUnknown.
func (s *Store) runTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := s.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }() // after Commit it does nothing
	if err := fn(tx); err != nil {
		return err
	}
	// The transaction's id, given at its first write: NULL when it wrote nothing, and then
	// there is nothing a lost COMMIT could have saved.
	var xid *string
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id_if_assigned()::text`).Scan(&xid); err != nil {
		return err
	}
	be, err := BackendOf(ctx, tx.Conn())
	if err != nil {
		return err
	}
	err = tx.Commit(ctx)
	if err == nil || xid == nil || !commitMayHaveHappened(err) {
		return err
	}
	committed, rerr := s.commitOutcome(context.WithoutCancel(ctx), be, *xid)
	switch {
	case rerr != nil:
		return errors.Join(ErrCommitOutcomeUnknown, err)
	case committed:
		return nil
	}
	return err
}

// commitMayHaveHappened tells a failed COMMIT whose transaction may still have committed: an
// error the server answered (a PgError) rolled it back; any other is a connection that failed,
// maybe with COMMIT sent. (Even one pgx calls safe to retry, as sent nothing: a connection
// closed while COMMIT was being sent is reported as found closed, and that COMMIT may have
// reached the server and committed.)
func commitMayHaveHappened(err error) bool {
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr)
}

// commitOutcome finds out whether transaction xid of backend be committed, retrying on new
// connections for at most commitOutcomeWait.
func (s *Store) commitOutcome(ctx context.Context, be Backend, xid string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, commitOutcomeWait)
	defer cancel()
	for {
		status, err := s.xactStatus(ctx, be, xid)
		if err == nil && status != "in progress" {
			return status == "committed", nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// xactStatus ends backend be if it still runs (its transaction then ends too), and reads the
// status of transaction xid: committed, aborted, or in progress while be has not ended yet.
func (s *Store) xactStatus(ctx context.Context, be Backend, xid string) (string, error) {
	// Each try on a new connection, given a part of the time, so that one that stops
	// answering leaves time for the next.
	ctx, cancel := context.WithTimeout(ctx, commitOutcomeWait/5)
	defer cancel()
	c, err := FreshConn(ctx, s.Pool)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close(ctx) }()
	running, err := be.End(ctx, c)
	if err != nil || running {
		return "in progress", err
	}
	var status *string
	if err := c.QueryRow(ctx, `SELECT pg_xact_status($1::xid8)`, xid).Scan(&status); err != nil {
		return "", err
	}
	if status == nil {
		return "", errors.New("eventstore: the transaction's status is no longer kept")
	}
	return *status, nil
}
