package audit

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/kyapi/kyapi/domain"
	"github.com/kyapi/kyapi/eventstore"
	"github.com/kyapi/kyapi/internal/durable"
)

// DigestFormat names the digest document's format (docs/operations.md, "Auditor's guide").
// Format 2 adds Legacy; a digest of format 1 (taken before it) still verifies, without it.
const (
	DigestFormat   = "kyapi-digest/2"
	digestFormatV1 = "kyapi-digest/1"
)

// Digest is a signed statement of what the store held: every stream's head (version and hash
// of its newest event) as of Position, folded into one Merkle root. Every event at or below
// Position is covered: an event there that is missing, changed or not in a head's chain
// shows when the store is verified against the digest (VerifyDigest).
type Digest struct {
	Format   string    `json:"format"`
	TakenAt  time.Time `json:"taken_at"`
	Position int64     `json:"position"`
	Streams  int       `json:"streams"`
	Events   int64     `json:"events"`
	// Root is the Merkle root (hex) over Heads in their order (stream id, byte order).
	Root string `json:"root"`
	// PublicKey (hex) is the Ed25519 key the digest was signed with; Signature (hex) signs
	// SignedMessage. An auditor compares PublicKey with the key the operator gave them.
	PublicKey string       `json:"public_key"`
	Signature string       `json:"signature"`
	Heads     []DigestHead `json:"heads"`
	// Legacy (hex SHA-256, format 2) covers the archive boundaries trusted without their last
	// event (legacy_boundaries, fixed since migration 0028; legacyRoot): a boundary passed off
	// as one of them afterwards (by a superuser with the triggers off) could carry any
	// balance, which no head's hash covers.
	Legacy string `json:"legacy,omitempty"`
}

// DigestHead is one stream's head in a digest.
type DigestHead struct {
	Stream  string `json:"stream"`
	Version int64  `json:"version"`
	Hash    string `json:"hash"` // hex SHA-256 of the event at Version, chained (eventstore.EventHash)
}

// SignedMessage is what the signature covers: every field but the heads, which the root
// covers, and the key itself.
func (d Digest) SignedMessage() []byte {
	m := fmt.Appendf(nil, "%s\ntaken_at %s\nposition %d\nstreams %d\nevents %d\nroot %s\n",
		d.Format, d.TakenAt.UTC().Format(time.RFC3339Nano), d.Position, d.Streams, d.Events, d.Root)
	if d.Format != digestFormatV1 {
		m = fmt.Appendf(m, "legacy %s\n", d.Legacy)
	}
	return m
}

// legacyRoot is SHA-256 over the legacy boundaries in stream id and version order, each as
// uint32 length of the stream id ‖ stream id ‖ uint64 version ‖ its chain hash (a stream
// number with no row in streams stands as "#N").
func legacyRoot(ctx context.Context, q eventstore.Querier) (string, error) {
	rows, err := q.Query(ctx, `SELECT coalesce(s.stream_id, '#' || l.stream_no), l.version, l.hash
		FROM legacy_boundaries l LEFT JOIN streams s USING (stream_no)
		ORDER BY coalesce(s.stream_id, '#' || l.stream_no) COLLATE "C", l.version`)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	var id string
	var version int64
	var hash []byte
	_, err = pgx.ForEachRow(rows, []any{&id, &version, &hash}, func() error {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(id)))
		b = append(b, id...)
		b = binary.BigEndian.AppendUint64(b, uint64(version))
		h.Write(append(b, hash...))
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}

// MerkleRoot folds stream heads into one hash, as RFC 6962 (Certificate Transparency) does
// with its leaves: a leaf is SHA-256(0x00, stream id length as uint32, stream id, version as
// uint64, hash), a node SHA-256(0x01, left, right), a list of n > 1 leaves is split after the
// largest power of two below n, and the root of no leaves is SHA-256 of nothing.
func MerkleRoot(heads []DigestHead) ([32]byte, error) {
	leaves := make([][32]byte, len(heads))
	for i, h := range heads {
		hash, err := decodeHash(h.Hash)
		if err != nil {
			return [32]byte{}, fmt.Errorf("head of stream %s: %w", h.Stream, err)
		}
		leaves[i] = leafHash(h.Stream, h.Version, hash)
	}
	return merkle(leaves), nil
}

func leafHash(stream string, version int64, hash [32]byte) [32]byte {
	b := make([]byte, 0, 1+4+len(stream)+8+32)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(stream)))
	b = append(b, stream...)
	b = binary.BigEndian.AppendUint64(b, uint64(version))
	b = append(b, hash[:]...)
	return sha256.Sum256(b)
}

func merkle(leaves [][32]byte) [32]byte {
	switch len(leaves) {
	case 0:
		return sha256.Sum256(nil)
	case 1:
		return leaves[0]
	}
	k := 1
	for k*2 < len(leaves) {
		k *= 2
	}
	l, r := merkle(leaves[:k]), merkle(leaves[k:])
	var b [65]byte
	b[0] = 1
	copy(b[1:], l[:])
	copy(b[33:], r[:])
	return sha256.Sum256(b[:])
}

func decodeHash(s string) ([32]byte, error) {
	var h [32]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		return h, fmt.Errorf("%q is not a hex SHA-256", s)
	}
	copy(h[:], b)
	return h, nil
}

// TakeDigest takes a digest of the store and signs it with key. It waits for the position to
// settle (eventstore.SettledPosition), then reads every stream's head as of that position in
// one snapshot: the digest never claims an event that a transaction still running could add
// below its position.
func TakeDigest(ctx context.Context, pool *pgxpool.Pool, key ed25519.PrivateKey, now time.Time) (Digest, error) {
	d := Digest{Format: DigestFormat, TakenAt: now.UTC().Truncate(time.Microsecond), Heads: []DigestHead{}}
	position, err := eventstore.SettledPosition(ctx, pool)
	if err != nil {
		return d, fmt.Errorf("digest: settled position: %w", err)
	}
	d.Position = position
	leaves := [][32]byte{}
	err = eventstore.ReadSnapshot(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if d.Legacy, err = legacyRoot(ctx, tx); err != nil {
			return err
		}
		return eventstore.HeadsAt(ctx, tx, position, func(h eventstore.Head) error {
			d.Heads = append(d.Heads, DigestHead{Stream: h.ID, Version: h.Version, Hash: hex.EncodeToString(h.Hash[:])})
			d.Events += h.Version
			leaves = append(leaves, leafHash(h.ID, h.Version, h.Hash))
			return nil
		})
	})
	if err != nil {
		return d, fmt.Errorf("digest: heads: %w", err)
	}
	d.Streams = len(d.Heads)
	root := merkle(leaves)
	d.Root = hex.EncodeToString(root[:])
	d.PublicKey = hex.EncodeToString(key.Public().(ed25519.PublicKey))
	d.Signature = hex.EncodeToString(ed25519.Sign(key, d.SignedMessage()))
	return d, nil
}

// CheckDigest checks a digest document on its own: its format, that its heads fold into its
// root, and that it is signed by its public key — and by trusted, when given (the key the
// operator published; without it, anyone could sign a digest of their own).
func CheckDigest(d Digest, trusted ed25519.PublicKey) error {
	if d.Format != DigestFormat && d.Format != digestFormatV1 {
		return fmt.Errorf("digest: format %q, want %q (or %q)", d.Format, DigestFormat, digestFormatV1)
	}
	pub, err := hex.DecodeString(d.PublicKey)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return errors.New("digest: public_key is not a hex Ed25519 public key")
	}
	if trusted != nil && !ed25519.PublicKey(pub).Equal(trusted) {
		return fmt.Errorf("digest: signed by key %s, not by the trusted key %x", d.PublicKey, []byte(trusted))
	}
	sig, err := hex.DecodeString(d.Signature)
	if err != nil || !ed25519.Verify(pub, d.SignedMessage(), sig) {
		return errors.New("digest: the signature does not verify: the document was altered after signing, or not signed by its public_key")
	}
	root, err := MerkleRoot(d.Heads)
	if err != nil {
		return fmt.Errorf("digest: %w", err)
	}
	if hex.EncodeToString(root[:]) != d.Root {
		return fmt.Errorf("digest: its heads fold into root %x, but it signs root %s: the heads were altered", root, d.Root)
	}
	if len(d.Heads) != d.Streams {
		return fmt.Errorf("digest: it holds %d heads but signs %d streams", len(d.Heads), d.Streams)
	}
	var events int64
	for i, h := range d.Heads {
		if i > 0 && d.Heads[i-1].Stream >= h.Stream {
			return fmt.Errorf("digest: heads are not in stream id order at %s", h.Stream)
		}
		events += h.Version
	}
	if events != d.Events {
		return fmt.Errorf("digest: its heads hold %d events but it signs %d", events, d.Events)
	}
	return nil
}

// ParseDigest reads a digest document: as `kyapi digest` writes it, or as GET /admin/digest
// answers it (inside {"data": ...}).
func ParseDigest(b []byte) (Digest, error) {
	var envelope struct {
		Data *Digest `json:"data"`
	}
	if err := json.Unmarshal(b, &envelope); err == nil && envelope.Data != nil {
		return *envelope.Data, nil
	}
	var d Digest
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("digest: not a digest document: %w", err)
	}
	return d, nil
}

// SaveDigest records a digest in the digests table, whence GET /admin/digest serves the newest.
func SaveDigest(ctx context.Context, pool *pgxpool.Pool, d Digest) error {
	doc, err := json.Marshal(d)
	if err != nil {
		return err
	}
	root, _ := hex.DecodeString(d.Root)
	pub, _ := hex.DecodeString(d.PublicKey)
	_, err = pool.Exec(ctx, `INSERT INTO digests (taken_at, position, root, public_key, document) VALUES ($1, $2, $3, $4, $5)`,
		d.TakenAt, d.Position, root, pub, doc)
	return err
}

// LatestDigest returns the newest digest document as it was saved, or domain.ErrNoDigest.
func LatestDigest(ctx context.Context, q eventstore.Querier) (json.RawMessage, error) {
	var doc []byte
	err := q.QueryRow(ctx, `SELECT document FROM digests ORDER BY taken_at DESC LIMIT 1`).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, domain.ErrNoDigest
	}
	return doc, err
}

// DigestIfDue takes, signs and saves a digest when the newest saved one is older than every
// (or there is none), and reports whether it did. Several processes may call it: they take
// turns on an advisory lock, and the second finds the first one's digest.
func DigestIfDue(ctx context.Context, pool *pgxpool.Pool, key ed25519.PrivateKey, now time.Time, every time.Duration) (bool, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(72100012)`).Scan(&got); err != nil || !got {
		return false, err
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(72100012)`)
	var due bool
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(taken_at), '-infinity') <= $1 FROM digests`, now.Add(-every)).Scan(&due); err != nil || !due {
		return false, err
	}
	d, err := TakeDigest(ctx, pool, key, now)
	if err != nil {
		return false, err
	}
	return true, SaveDigest(ctx, pool, d)
}

// NewSigningKey makes an Ed25519 key and writes it to path (PKCS #8 in PEM, mode 0600),
// refusing to overwrite a file. It returns the public key to give to auditors.
func NewSigningKey(path string) (ed25519.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	// Whole or not at all, and durable before its public key is printed: a partial key file
	// would refuse every later -new-key under its name, and a key lost to a crash after its
	// public key was given to auditors could sign nothing they trust.
	if err := durable.CreateFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	return pub, nil
}

// LoadSigningKey reads a key written by NewSigningKey.
func LoadSigningKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: not a PEM \"PRIVATE KEY\" file (make one with kyapi digest -new-key FILE)", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an Ed25519 key", path)
	}
	return priv, nil
}

// ParsePublicKey reads a hex Ed25519 public key, as `kyapi digest -new-key` prints it.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%q is not a hex Ed25519 public key (64 hex digits)", s)
	}
	return ed25519.PublicKey(b), nil
}
