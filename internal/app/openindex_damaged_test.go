package app

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kyapi/kyapi/projections/placeindex"
	"github.com/kyapi/kyapi/projections/placeindex/bleveindex"
)

// An embedded index damaged while no process had it open (a file of it truncated or deleted)
// is not opened: serve stops with an error naming the directory and how to have it rebuilt.
// A truncated bolt file made bbolt panic, and serve crashed with a goroutine dump; a missing
// or truncated segment said "error parsing mapping JSON" and no more.
func TestOpenIndexOfADamagedDataDirSaysHowToRebuildIt(t *testing.T) {
	pristine := filepath.Join(t.TempDir(), "placeindex")
	x, err := bleveindex.Open(pristine)
	if err != nil {
		t.Fatal(err)
	}
	for b := range 5 {
		var docs []placeindex.Doc
		for i := range 600 {
			docs = append(docs, placeindex.Doc{PlaceID: fmt.Sprintf("p%05d", b*600+i), Name: fmt.Sprintf("Place %d", i), Category: "food.diner",
				TownSlug: "berea", Location: &placeindex.GeoPoint{Lat: 37 + float64(i)/1000, Lng: -84}, Version: 1})
		}
		if err := x.Upsert(context.Background(), docs, nil, fmt.Sprintf("cp%d", b)); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	for name, damage := range map[string]func(store string) error{
		"root.bolt truncated to 8 KiB": func(store string) error { return os.Truncate(filepath.Join(store, "root.bolt"), 8192) },
		"root.bolt emptied":            func(store string) error { return os.Truncate(filepath.Join(store, "root.bolt"), 0) },
		"segments deleted": func(store string) error {
			zaps, err := filepath.Glob(filepath.Join(store, "*.zap"))
			for _, z := range zaps {
				err = os.Remove(z)
			}
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			dataDir := t.TempDir()
			if out, err := exec.Command("cp", "-a", pristine, dataDir).CombinedOutput(); err != nil {
				t.Fatalf("cp: %v %s", err, out)
			}
			if err := damage(filepath.Join(dataDir, "placeindex", "gen-000001", "store")); err != nil {
				t.Fatal(err)
			}
			x, err := OpenIndex(context.Background(), Config{DataDir: dataDir})
			if err == nil {
				x.Close()
				t.Fatalf("OpenIndex of a DATA_DIR whose index has its %s opened it", name)
			}
			dir := filepath.Join(dataDir, "placeindex")
			if msg := err.Error(); !strings.Contains(msg, "delete "+dir) || !strings.Contains(msg, "rebuild") {
				t.Errorf("OpenIndex of a damaged index: %q; want it to say to delete %s for serve to rebuild it", msg, dir)
			}
		})
	}
}
