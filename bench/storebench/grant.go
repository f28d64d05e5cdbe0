package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"
)

// grantCheck is what a finished bonus grant did, checked against the store.
type grantCheck struct {
	OutageID    string    `json:"outage_id"`
	State       string    `json:"state"`
	GrantedAt   time.Time `json:"granted_at"`
	FinishedAt  time.Time `json:"finished_at"`
	DurationS   float64   `json:"duration_s"` // finished_at - granted_at, as the server recorded them
	Eligible    int64     `json:"eligible"`   // accounts with a usable key at granted_at
	Reported    int64     `json:"reported"`   // accounts the grant row says it credited
	Events      int64     `json:"events"`     // BonusGranted events of this outage
	Credited    int64     `json:"credited"`   // distinct accounts with such an event
	Missing     int64     `json:"missing"`    // eligible accounts without one
	Ineligible  int64     `json:"ineligible"` // credited accounts that were not eligible
	WrongAmount int64     `json:"wrong_amount"`
	Exact       bool      `json:"exact"` // every eligible account credited exactly once, nothing else
}

func runGrantCheck(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("grant-check", flag.ContinueOnError)
	outage := fs.String("outage", "", "outage_id of the grant")
	out := fs.String("out", "-", "JSON file to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *outage == "" {
		return errors.New("-outage is required")
	}
	pool, err := connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	c := grantCheck{OutageID: *outage}
	var credits int64
	var finished *time.Time
	if err := pool.QueryRow(ctx, `SELECT state, granted_at, finished_at, accounts, credits FROM bonus_grants WHERE outage_id = $1`, *outage).
		Scan(&c.State, &c.GrantedAt, &finished, &c.Reported, &credits); err != nil {
		return fmt.Errorf("grant %s: %w", *outage, err)
	}
	if finished != nil {
		c.FinishedAt = finished.UTC()
		c.DurationS = finished.Sub(c.GrantedAt).Seconds()
	}
	// Eligibility is the grant's own rule (commands/bonus.go): a key issued by granted_at and
	// neither revoked nor past its grace then.
	err = pool.QueryRow(ctx, `
		WITH eligible AS (
			SELECT DISTINCT a.stream_no FROM api_keys k JOIN accounts a USING (account_id)
			WHERE k.issued_at <= $2 AND (k.revoked_at IS NULL OR k.revoked_at > $2) AND (k.grace_until IS NULL OR k.grace_until > $2)),
		granted AS (
			SELECT e.stream_no, (e.payload->>'credits')::bigint AS credits, (e.payload->>'credits_delta')::bigint AS delta
			FROM events e WHERE e.type = 'BonusGranted' AND e.payload->>'outage_id' = $1)
		SELECT (SELECT count(*) FROM eligible),
		       (SELECT count(*) FROM granted),
		       (SELECT count(DISTINCT stream_no) FROM granted),
		       (SELECT count(*) FROM eligible WHERE stream_no NOT IN (SELECT stream_no FROM granted)),
		       (SELECT count(DISTINCT stream_no) FROM granted WHERE stream_no NOT IN (SELECT stream_no FROM eligible)),
		       (SELECT count(*) FROM granted WHERE credits <> $3 OR delta <> $3)`, *outage, c.GrantedAt, credits).
		Scan(&c.Eligible, &c.Events, &c.Credited, &c.Missing, &c.Ineligible, &c.WrongAmount)
	if err != nil {
		return err
	}
	c.GrantedAt = c.GrantedAt.UTC()
	c.Exact = c.State == "done" && c.Events == c.Eligible && c.Credited == c.Eligible && c.Missing == 0 &&
		c.Ineligible == 0 && c.WrongAmount == 0 && c.Reported == c.Eligible
	fmt.Printf("grant %s: %s in %.1fs, %d eligible, %d events on %d accounts, %d missing, %d ineligible, %d wrong amounts: exact=%v\n",
		c.OutageID, c.State, c.DurationS, c.Eligible, c.Events, c.Credited, c.Missing, c.Ineligible, c.WrongAmount, c.Exact)
	return writeJSON(*out, c)
}
