package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/archive"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/projections"
)

// runArchive moves the event partitions wholly below a position to a file and drops them
// (archive.Archive), or lists the partitions and archives (-list).
func runArchive(ctx context.Context, args []string) error {
	fs := newFlags("archive", "-before POSITION -o FILE | kyapi archive -list")
	before := fs.Int64("before", 0, "archive every partition whose positions all lie below this one")
	out := fs.String("o", "", "the archive file to create (never overwritten)")
	list := fs.Bool("list", false, "list the partitions and the archived ranges, change nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *list && (*before != 0 || *out != "") {
		return usageError(fs, "give -before POSITION and -o FILE, or -list, not both")
	}
	if !*list && (*before <= 0 || *out == "") {
		return usageError(fs, "give -before POSITION (above 0) and -o FILE, or -list")
	}
	if *out == "-" {
		// As kyapi digest -o reads it, "-" would be standard output; an archive is a file, synced
		// before its partitions are dropped, and never a file named "-" the operator did not mean.
		return usageError(fs, "-o - is standard output, where an archive cannot go (it is synced before the partitions are dropped): name a file (./- for a file named so)")
	}
	_, pool, err := connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	if *list {
		return listArchives(ctx, pool)
	}
	var names []string
	for _, a := range projections.SQLAppliers(time.Now) {
		names = append(names, a.Name())
	}
	res, err := archive.Archive(ctx, pool, archive.Options{Before: *before, File: *out, Now: time.Now(), Projections: names})
	if err != nil {
		return err
	}
	fmt.Printf("archived positions %d to %d (%d events of %d streams, partitions %v) to %s\nsha256 %s\n",
		res.From, res.To-1, res.Events, res.Streams, res.Partitions, *out, hex.EncodeToString(res.SHA256[:]))
	return nil
}

func listArchives(ctx context.Context, pool *pgxpool.Pool) error {
	archives, err := eventstore.Archives(ctx, pool)
	if err != nil {
		return err
	}
	for _, a := range archives {
		fmt.Printf("archived  positions %d to %d  %d events  %s  sha256 %s  %s\n", a.From, a.To-1, a.Events,
			a.ArchivedAt.Format(time.RFC3339), hex.EncodeToString(a.SHA256[:]), a.FileName)
	}
	parts, err := eventstore.Partitions(ctx, pool)
	if err != nil {
		return err
	}
	next, err := eventstore.NextPosition(ctx, pool)
	if err != nil {
		return err
	}
	for _, p := range parts {
		note := ""
		if p.From <= next && next < p.To {
			note = "  (appends go here)"
		}
		fmt.Printf("partition %s  positions %d to %d%s\n", p.Name, p.From, p.To-1, note)
	}
	return nil
}

// runRestore checks an archive file and attaches its range again (archive.Restore).
func runRestore(ctx context.Context, args []string) error {
	fs := newFlags("restore", "FILE")
	args, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(args) != 1 {
		return usageError(fs, "give one archive file")
	}
	_, pool, err := connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := archive.Restore(ctx, pool, args[0])
	if errors.Is(err, archive.ErrOutcomeUnknown) {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w (nothing was restored)", args[0], err)
	}
	fmt.Printf("restored positions %d to %d (%d events of %d streams) from %s\n", res.From, res.To-1, res.Events, res.Streams, args[0])
	return nil
}
