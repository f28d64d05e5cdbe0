package bleveindex

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/index/scorch"
)

// checkSegments refuses an index whose segment files do not hold what they held when written:
// damaged while no process had the index open. zap checks nothing of a segment's content as it
// opens it, and reads it through its memory map as queries ask: the damage would show only as
// an error of every query that read it, for as long as the index was not rebuilt, and a merge
// would copy it into a new segment. A zap segment ends with the CRC-32 (IEEE) of every byte
// before it (zapx persistFooter).
func checkSegments(b bleve.Index) error {
	in, err := b.Advanced()
	if err != nil {
		return err
	}
	r, err := in.Reader()
	if err != nil {
		return err
	}
	defer r.Close()
	snapshot, ok := r.(*scorch.IndexSnapshot)
	if !ok {
		return nil
	}
	for _, s := range snapshot.Segments() {
		if f, ok := s.Segment().(interface{ Path() string }); ok { // not one held in memory
			if err := checkSegmentCRC(f.Path()); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkSegmentCRC compares the CRC-32 of the segment file at path, read as a file (not mapped),
// with the one its last four bytes hold.
func checkSegmentCRC(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	n := info.Size()
	if n < 4 {
		return fmt.Errorf("segment %s is %d bytes, too short to end with its CRC-32", filepath.Base(path), n)
	}
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, n-4)); err != nil {
		return err
	}
	var footer [4]byte
	if _, err := f.ReadAt(footer[:], n-4); err != nil {
		return err
	}
	if got, want := h.Sum32(), binary.BigEndian.Uint32(footer[:]); got != want {
		return fmt.Errorf("segment %s holds bytes whose CRC-32 is %08x where it says %08x: it was damaged", filepath.Base(path), got, want)
	}
	return nil
}
