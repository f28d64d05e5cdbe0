package pgtest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// Where a CommitCutter loses its connection.
const (
	// CutAfterCommit: COMMIT reaches the server, which commits; its answer never comes back.
	CutAfterCommit = 1
	// CutBeforeCommit: COMMIT never reaches the server, which rolls the transaction back.
	CutBeforeCommit = 2
)

// CommitCutter is a proxy between a client and the test server that, once armed, loses the
// connection of the next COMMIT sent through it (a simple query, as pgx's Tx.Commit sends it,
// or a prepared statement's Bind, as in a pgx.Batch): a database restarted, failed over or cut
// off by the network at that moment.
type CommitCutter struct {
	armed          atomic.Int32
	fired          atomic.Int32
	refuseAfterCut atomic.Bool
	refusing       atomic.Bool
}

// NewCommitCutter starts a cutter in front of the server of dbURL and returns it with the URL
// that goes through it (without TLS, which would hide the COMMIT).
func NewCommitCutter(t testing.TB, dbURL string) (*CommitCutter, string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &CommitCutter{}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	target := u.Host
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			if c.refusing.Load() {
				client.Close()
				continue
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, client, server)
			mu.Unlock()
			go c.relay(client, server)
		}
	}()
	u.Host = ln.Addr().String()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return c, u.String()
}

// Arm makes the next COMMIT lose its connection, as mode says.
func (c *CommitCutter) Arm(mode int32) { c.armed.Store(mode) }

// RefuseAfterCut makes the database unreachable through the cutter once it has cut a COMMIT:
// every new connection is closed at once.
func (c *CommitCutter) RefuseAfterCut() { c.refuseAfterCut.Store(true) }

// Fired reports how the last armed cut happened (0 while none did).
func (c *CommitCutter) Fired() int32 { return c.fired.Load() }

func (c *CommitCutter) relay(client, server net.Conn) {
	defer client.Close()
	defer server.Close()
	var dropAnswers atomic.Bool
	go func() { // the server's messages, until the connection is cut
		defer client.Close()
		r := bufio.NewReader(server)
		for {
			m, err := readMessage(r, true)
			if err != nil || dropAnswers.Load() {
				return // after a cut COMMIT nothing more reaches the client
			}
			if _, err := client.Write(m); err != nil {
				return
			}
		}
	}()
	r := bufio.NewReader(client)
	statements := map[string]bool{} // prepared statement name: is it COMMIT
	for typed := false; ; typed = true {
		m, err := readMessage(r, typed)
		if err != nil {
			return
		}
		if typed && c.isCommit(m, statements) {
			mode := c.armed.Swap(0)
			if mode != 0 && c.refuseAfterCut.Load() {
				c.refusing.Store(true)
			}
			switch mode {
			case CutBeforeCommit:
				c.fired.Store(mode)
				return
			case CutAfterCommit:
				dropAnswers.Store(true)
				c.fired.Store(mode)
			}
		}
		if _, err := server.Write(m); err != nil {
			return
		}
	}
}

// isCommit tells a message that runs COMMIT: a simple query, or the Bind of a statement
// prepared as COMMIT (pgx sends a batch's statements so); it learns the statements from the
// Parse messages it sees.
func (c *CommitCutter) isCommit(m []byte, statements map[string]bool) bool {
	body := m[5:]
	switch m[0] {
	case 'Q':
		return isCommitSQL(body)
	case 'P': // Parse: statement name, query, parameter types
		name, rest, _ := bytes.Cut(body, []byte{0})
		statements[string(name)] = isCommitSQL(rest)
	case 'B': // Bind: portal name, statement name, ...
		_, rest, _ := bytes.Cut(body, []byte{0})
		name, _, _ := bytes.Cut(rest, []byte{0})
		return statements[string(name)]
	}
	return false
}

func isCommitSQL(b []byte) bool {
	sql, _, _ := bytes.Cut(b, []byte{0})
	return bytes.EqualFold(bytes.TrimSpace(bytes.TrimRight(sql, "; ")), []byte("commit"))
}

// readMessage reads one protocol message whole: a type byte (all but the first message a
// client sends), a length that counts itself, the body.
func readMessage(r *bufio.Reader, typed bool) ([]byte, error) {
	var head []byte
	if typed {
		b, err := r.ReadByte()
		if err != nil {
			return nil, err
		}
		head = []byte{b}
	}
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size < 4 || size > 1<<30 {
		return nil, fmt.Errorf("pgtest: message length %d", size)
	}
	body := make([]byte, size-4)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return append(append(head, n[:]...), body...), nil
}
