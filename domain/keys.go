package domain

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"hash/crc32"
	"io"
	"strings"
	"time"
)

// KeyPrefix starts every live key; it is the only part shown besides the last 4 characters.
const KeyPrefix = "svc_live_"

// GracePeriod is how long a rotated key keeps working.
const GracePeriod = 24 * time.Hour

const (
	keySecretLen   = 36 // random base62 characters: ~214 bits
	keyChecksumLen = 6  // base62 CRC32 of the secret, so typos are refused without a lookup
	keyLen         = len(KeyPrefix) + keySecretLen + keyChecksumLen
	base62         = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

// KeyState is where a key is in its lifecycle.
type KeyState string

const (
	KeyStateActive  KeyState = "active"
	KeyStateGrace   KeyState = "grace"
	KeyStateRevoked KeyState = "revoked"
)

// KeyHash is the SHA-256 of a full key: the only form in which a key is stored.
type KeyHash [32]byte

// HashKey hashes a full key.
func HashKey(key string) KeyHash { return sha256.Sum256([]byte(key)) }

// Key is an API key as the write side knows it.
type Key struct {
	ID         string
	No         int // the key's number within its account: 1 for its first key
	AccountID  string
	Last4      string
	State      KeyState
	IssuedAt   time.Time
	GraceUntil *time.Time
}

// StateAt is the key's state at now: a grace key whose grace has ended is revoked.
func (k Key) StateAt(now time.Time) KeyState {
	if k.State == KeyStateGrace && k.GraceUntil != nil && !now.Before(*k.GraceUntil) {
		return KeyStateRevoked
	}
	return k.State
}

// Authorize tells whether the key may be used at now.
func (k Key) Authorize(now time.Time) error {
	if k.StateAt(now) == KeyStateRevoked {
		return ErrKeyRevoked
	}
	return nil
}

// NewKey generates a full key from r (crypto/rand when nil).
func NewKey(r io.Reader) (string, error) {
	if r == nil {
		r = rand.Reader
	}
	secret := make([]byte, keySecretLen)
	buf := make([]byte, 1)
	for i := 0; i < keySecretLen; {
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		if buf[0] >= 248 { // 248 = 4*62: rejection keeps the characters uniform
			continue
		}
		secret[i] = base62[int(buf[0])%62]
		i++
	}
	return KeyPrefix + string(secret) + keyChecksum(string(secret)), nil
}

func keyChecksum(secret string) string {
	var b [8]byte
	binary.BigEndian.PutUint32(b[4:], crc32.ChecksumIEEE([]byte(secret)))
	n := binary.BigEndian.Uint64(b[:])
	out := make([]byte, keyChecksumLen)
	for i := keyChecksumLen - 1; i >= 0; i-- {
		out[i] = base62[n%62]
		n /= 62
	}
	return string(out)
}

// ParseAuthorization extracts the key from an Authorization header value. A missing or
// malformed header is ErrMissingKey; a token that cannot be a key of ours is ErrInvalidKey.
func ParseAuthorization(header string) (string, error) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", ErrMissingKey
	}
	token = strings.TrimSpace(token)
	if token == "" || strings.ContainsAny(token, " \t") {
		// A bearer token is one word (RFC 6750: b64token has no blank): "Bearer <key> extra"
		// is a malformed header, not an unknown key.
		return "", ErrMissingKey
	}
	if !WellFormedKey(token) {
		return "", ErrInvalidKey
	}
	return token, nil
}

// ParseAuthorizationFields is ParseAuthorization for every Authorization field of a request
// (net/http's Header.Values). Authorization is not a list (RFC 9110, section 5.3): a request
// carrying it more than once is malformed, ErrMissingKey, whatever the fields hold, rather
// than authenticated by whichever came first.
func ParseAuthorizationFields(values []string) (string, error) {
	if len(values) != 1 {
		return "", ErrMissingKey
	}
	return ParseAuthorization(values[0])
}

// WellFormedKey checks prefix, length, alphabet and checksum.
func WellFormedKey(key string) bool {
	if len(key) != keyLen || !strings.HasPrefix(key, KeyPrefix) {
		return false
	}
	rest := key[len(KeyPrefix):]
	for i := 0; i < len(rest); i++ {
		if strings.IndexByte(base62, rest[i]) < 0 {
			return false
		}
	}
	return keyChecksum(rest[:keySecretLen]) == rest[keySecretLen:]
}

// Last4 is the shown tail of a key.
func Last4(key string) string { return key[len(key)-4:] }

// KeyRotation is what issuing a new key does to an account's existing keys.
type KeyRotation struct {
	Rotated    *Key      // the active key that enters grace, if any
	GraceUntil time.Time // end of the rotated key's grace
	Revoked    []Key     // keys still in grace, revoked at once by this second rotation
}

// PlanKeyIssue decides the rotation for a new key issued at now: the active key enters a
// 24-hour grace, and a key already in grace is revoked at once by that second rotation. A key
// issued while no key is active rotates nothing, so a key in grace keeps the rest of its grace.
func PlanKeyIssue(keys []Key, now time.Time) KeyRotation {
	var r KeyRotation
	var inGrace []Key
	for i := range keys {
		switch keys[i].StateAt(now) {
		case KeyStateActive:
			k := keys[i]
			r.Rotated = &k
			r.GraceUntil = now.Add(GracePeriod)
		case KeyStateGrace:
			inGrace = append(inGrace, keys[i])
		}
	}
	if r.Rotated != nil {
		r.Revoked = inGrace
	}
	return r
}
