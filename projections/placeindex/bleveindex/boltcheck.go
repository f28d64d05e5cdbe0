package bleveindex

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"time"

	"go.etcd.io/bbolt"
)

// checkBoltLength refuses a bolt file shorter than the pages its meta says it holds: one cut
// while no process had it open. bbolt maps the file into memory and reads the pages its meta
// names without looking at the file's length, and a page past the end faults (SIGBUS, or
// SIGSEGV past the mapping): a fault kills the whole process, which no recover can stop. bbolt
// never lets its file be shorter than its pages (it grows the file before it writes past it),
// so a shorter one was damaged. A file that is missing, empty or without a valid meta page is
// left for bbolt to answer, which it does without reading past the end.
func checkBoltLength(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	m, ok := newestBoltMeta(f)
	if !ok {
		return nil
	}
	if size, need := uint64(info.Size()), m.pages*m.pageSize; size < need {
		return fmt.Errorf("%s is %d bytes, shorter than the %d pages of %d bytes its meta names (%d bytes): it was cut", path, size, m.pages, m.pageSize, need)
	}
	if m.root >= m.pages || (m.freelist >= m.pages && m.freelist != boltNoFreelist) {
		return fmt.Errorf("%s's meta names a page past its %d pages (root %d, freelist %d)", path, m.pages, m.root, m.freelist)
	}
	return nil
}

// boltMeta is what checkBoltLength reads of a bolt meta page.
type boltMeta struct {
	pageSize, pages, root, freelist, txid uint64
}

// The meta page as bbolt writes it (go.etcd.io/bbolt/internal/common: a 16-byte page header,
// then the Meta struct in the machine's byte order, its checksum FNV-64a of what precedes it).
const (
	boltPageHeader = 16
	boltMetaSize   = 64
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	boltNoFreelist = ^uint64(0)
)

// newestBoltMeta is the meta page bbolt opens the file with: of the two (pages 0 and 1), the
// one of the later transaction if it is valid, else the other. ok is false if neither is.
func newestBoltMeta(f io.ReaderAt) (m boltMeta, ok bool) {
	m0, ok0 := readBoltMeta(f, 0)
	pageSize := m0.pageSize
	if !ok0 {
		// bbolt looks for the second meta page at each page size it supports.
		for i := range 15 {
			if m1, ok1 := readBoltMeta(f, 1024<<i); ok1 {
				pageSize = m1.pageSize
				break
			}
		}
	}
	if pageSize == 0 {
		return m, false
	}
	m1, ok1 := readBoltMeta(f, int64(pageSize))
	switch {
	case ok0 && ok1:
		if m1.txid > m0.txid {
			return m1, true
		}
		return m0, true
	case ok0:
		return m0, true
	case ok1:
		return m1, true
	}
	return m, false
}

// readBoltMeta reads the meta page at offset, ok only if its magic, version and checksum hold.
func readBoltMeta(f io.ReaderAt, offset int64) (m boltMeta, ok bool) {
	var b [boltPageHeader + boltMetaSize]byte
	if _, err := f.ReadAt(b[:], offset); err != nil {
		return m, false
	}
	meta := b[boltPageHeader:]
	order := binary.NativeEndian
	h := fnv.New64a()
	_, _ = h.Write(meta[:56])
	if order.Uint32(meta[0:]) != boltMagic || order.Uint32(meta[4:]) != boltVersion || order.Uint64(meta[56:]) != h.Sum64() {
		return m, false
	}
	return boltMeta{
		pageSize: uint64(order.Uint32(meta[8:])),
		root:     order.Uint64(meta[16:]),
		freelist: order.Uint64(meta[32:]),
		pages:    order.Uint64(meta[40:]),
		txid:     order.Uint64(meta[48:]),
	}, true
}

// readBoltWhole reads every bucket, key and value of the bolt file at path, in the calling
// goroutine, so that damage anywhere in its pages shows as that goroutine's panic (bbolt
// asserts on a page that is not what its parent says; openGeneration makes a fault a panic
// too). bleve reads only the newest snapshot its root.bolt keeps as it opens; its persister
// reads the older ones' pages (to delete them) in a goroutine of its own, where such a panic
// stops it for good and every later batch waits for it for ever. A missing file is left for
// bleve to answer. timeout bounds the wait for another process's lock (0: for ever).
func readBoltWhole(path string, timeout time.Duration) error {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: timeout})
	if err != nil {
		return err
	}
	defer db.Close()
	tx, err := db.Begin(false)
	if err != nil {
		return err
	}
	// Deferred, not left to View: a panic while reading must still end the transaction, or
	// Close would wait for it.
	defer tx.Rollback()
	var readBucket func(b *bbolt.Bucket) error
	readBucket = func(b *bbolt.Bucket) error {
		return b.ForEach(func(k, v []byte) error {
			if v != nil {
				_ = crc32.ChecksumIEEE(v) // reads every byte of the value, overflow pages included
				return nil
			}
			sub := b.Bucket(k)
			if sub == nil {
				return fmt.Errorf("bucket %x: not readable", k)
			}
			return readBucket(sub)
		})
	}
	return tx.ForEach(func(_ []byte, b *bbolt.Bucket) error { return readBucket(b) })
}
