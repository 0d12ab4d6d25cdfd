package protocol

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ReservedPrefix starts every ID that A2 derives for itself. Caller IDs may
// never start with it (R-LOG-06).
const ReservedPrefix = "a2.ai:"

// MaxIDLength is the longest caller ID A2 accepts, in bytes.
const MaxIDLength = 256

// a2IDHashChars is the number of base32 characters after ReservedPrefix in
// every A2 ID (OQ-37): 26 characters carry 130 bits of the SHA-256 digest.
const a2IDHashChars = 26

// A2IDLength is the fixed length of every ID DeriveID returns.
const A2IDLength = len(ReservedPrefix) + a2IDHashChars

var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// ValidationError says which field of an event or option is wrong and why.
// Every ingress path returns one for bad client input; nothing is appended.
type ValidationError struct {
	Field   string // JSON path of the offending field, e.g. "payload.message.id"
	Message string
}

func (e *ValidationError) Error() string {
	if e.Field == "" {
		return "protocol: " + e.Message
	}
	return fmt.Sprintf("protocol: %s: %s", e.Field, e.Message)
}

func invalid(field, format string, args ...any) *ValidationError {
	return &ValidationError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// ValidateCallerID checks an ID supplied by a caller (R-LOG-05, R-LOG-06):
// nonempty, at most MaxIDLength bytes, valid UTF-8 without control
// characters, and not starting with ReservedPrefix.
func ValidateCallerID(field, id string) error {
	switch {
	case id == "":
		return invalid(field, "must not be empty")
	case len(id) > MaxIDLength:
		return invalid(field, "is %d bytes, longer than the limit of %d", len(id), MaxIDLength)
	case !utf8.ValidString(id):
		return invalid(field, "is not valid UTF-8")
	case strings.HasPrefix(id, ReservedPrefix):
		return invalid(field, "must not start with the reserved prefix %q", ReservedPrefix)
	}
	for _, r := range id {
		if unicode.IsControl(r) {
			return invalid(field, "must not contain control characters")
		}
	}
	return nil
}

// IsA2ID reports whether id is one of A2's own derived IDs.
func IsA2ID(id string) bool { return strings.HasPrefix(id, ReservedPrefix) }

// DeriveID returns A2's deterministic ID for a purpose and its inputs
// (R-LOG-07, OQ-37): ReservedPrefix followed by the first 26 base32
// characters of SHA-256 over the length-prefixed purpose and parts. The same
// inputs always give the same ID, so a retried handler converges on the
// events it wrote before; different inputs give different IDs.
func DeriveID(purpose string, parts ...string) string {
	sum := digest(append([]string{purpose}, parts...))
	return ReservedPrefix + lowerBase32.EncodeToString(sum[:])[:a2IDHashChars]
}

// IdempotentID derives a deterministic caller ID from its parts, for
// applications that must converge on the same event when a handler retries
// (R-LOG-11): base64url of SHA-256 over the length-prefixed parts, 43
// characters. Include the contract and the session among the parts so that
// the result is unique across the store. The result never starts with
// ReservedPrefix (base64url has no '.' or ':').
func IdempotentID(parts ...string) string {
	sum := digest(parts)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func digest(parts []string) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}
