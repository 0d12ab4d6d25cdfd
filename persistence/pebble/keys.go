package pebble

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Key layout. Every key starts with a one-byte tag naming its kind; the
// layout is documented, with examples, in docs/storage.md.
//
//	'e' frame(session) be64(index)                 -> Event record (the log)
//	'i' eventID                                    -> EventRef (global ID index)
//	'l' session                                    -> ownership (epoch, owner)
//	'm' session                                    -> SessionMeta (last index)
//	'n' member                                     -> member lease (end, Unix ms)
//	's' frame(session) frame(reducer) be64(index)  -> Snapshot record
//	'v'                                            -> format version (uvarint)
//	'w' session                                    -> (empty) the session may have work
//	'x'                                            -> (empty) the work index is complete
//
// frame(x) is uvarint(len(x)) followed by x, so that no session ID is a
// prefix of another's keys whatever bytes it contains. Indexes are
// big-endian so that byte order is index order and a range read of one
// session is one forward scan. Meta keys hold the bare session ID, so a scan
// of the 'm' range lists sessions in ascending order.
const (
	tagLog      = 'e'
	tagID       = 'i'
	tagLease    = 'l'
	tagMeta     = 'm'
	tagMember   = 'n'
	tagSnapshot = 's'
	tagFormat   = 'v'
	tagWork     = 'w'
	tagWorkDone = 'x'
)

// formatVersion is the version of the layout and encodings above. Open
// refuses a store written with another version.
const formatVersion = 1

var formatKey = []byte{tagFormat}

// workCompleteKey marks a work index that covers every session: written
// with the format version of a new store, or by MarkWorkIndexComplete.
var workCompleteKey = []byte{tagWorkDone}

// leaseKey is the key of session's ownership (its epoch and owner).
func leaseKey(session string) []byte {
	k := make([]byte, 0, 1+len(session))
	return append(append(k, tagLease), session...)
}

// memberKey is the key of member's lease.
func memberKey(member string) []byte {
	k := make([]byte, 0, 1+len(member))
	return append(append(k, tagMember), member...)
}

// workKey is the key of session's entry in the index of sessions with work
// (the bare session ID, so that a scan of the 'w' range lists them in
// ascending order).
func workKey(session string) []byte {
	k := make([]byte, 0, 1+len(session))
	return append(append(k, tagWork), session...)
}

func appendFrame(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// logPrefix is the prefix shared by every log key of session.
func logPrefix(session string) []byte {
	k := make([]byte, 0, 1+binary.MaxVarintLen64+len(session)+8)
	return appendFrame(append(k, tagLog), session)
}

// logKey is the key of the event at index of session.
func logKey(session string, index uint64) []byte {
	return binary.BigEndian.AppendUint64(logPrefix(session), index)
}

// idKey is the key of the global event-ID index entry for id.
func idKey(id string) []byte {
	k := make([]byte, 0, 1+len(id))
	return append(append(k, tagID), id...)
}

// metaKey is the key of session's metadata.
func metaKey(session string) []byte {
	k := make([]byte, 0, 1+len(session))
	return append(append(k, tagMeta), session...)
}

// snapshotPrefix is the prefix of every snapshot key of (session, reducer).
func snapshotPrefix(session, reducer string) []byte {
	k := make([]byte, 0, 2+2*binary.MaxVarintLen64+len(session)+len(reducer)+8)
	return appendFrame(appendFrame(append(k, tagSnapshot), session), reducer)
}

// snapshotKey is the key of the snapshot of (session, reducer) at index.
func snapshotKey(session, reducer string, index uint64) []byte {
	return binary.BigEndian.AppendUint64(snapshotPrefix(session, reducer), index)
}

// prefixEnd returns the smallest key greater than every key with prefix p,
// or nil when there is none (p is all 0xff).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

var errKeyIndex = errors.New("key does not end in an 8-byte index")

// keyIndex returns the big-endian index that ends a log or snapshot key
// whose prefix has length prefixLen.
func keyIndex(key []byte, prefixLen int) (uint64, error) {
	if len(key) != prefixLen+8 {
		return 0, errKeyIndex
	}
	return binary.BigEndian.Uint64(key[prefixLen:]), nil
}

// describeKey renders a key for error messages: its kind, session and index
// when it parses, else the raw bytes quoted.
func describeKey(key []byte) string {
	if len(key) == 0 {
		return `""`
	}
	readFrame := func(b []byte) (string, []byte, bool) {
		n, w := binary.Uvarint(b)
		if w <= 0 || uint64(len(b)-w) < n {
			return "", nil, false
		}
		return string(b[w : w+int(n)]), b[w+int(n):], true
	}
	switch key[0] {
	case tagLog:
		if s, rest, ok := readFrame(key[1:]); ok && len(rest) == 8 {
			return fmt.Sprintf("log key %q (session %q, index %d)", key, s, binary.BigEndian.Uint64(rest))
		}
	case tagID:
		return fmt.Sprintf("event-ID key %q (event %q)", key, key[1:])
	case tagMeta:
		return fmt.Sprintf("meta key %q (session %q)", key, key[1:])
	case tagSnapshot:
		if s, rest, ok := readFrame(key[1:]); ok {
			if r, rest, ok := readFrame(rest); ok && len(rest) == 8 {
				return fmt.Sprintf("snapshot key %q (session %q, reducer %q, index %d)", key, s, r, binary.BigEndian.Uint64(rest))
			}
		}
	case tagFormat:
		return fmt.Sprintf("format key %q", key)
	case tagWork:
		return fmt.Sprintf("work key %q (session %q)", key, key[1:])
	case tagLease:
		return fmt.Sprintf("ownership key %q (session %q)", key, key[1:])
	case tagMember:
		return fmt.Sprintf("member lease key %q (member %q)", key, key[1:])
	case tagWorkDone:
		return fmt.Sprintf("work-index-complete key %q", key)
	}
	return fmt.Sprintf("key %q", key)
}
