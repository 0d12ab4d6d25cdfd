package sse

import (
	"bytes"
	"errors"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// errNotString is returned by RawString for a JSON value that is not a
// string.
var errNotString = errors.New("not a JSON string")

// RawString decodes a JSON string literal to its bytes. Unlike
// encoding/json it keeps bytes that are not valid UTF-8 as they are, so
// that a character a server split across two stream chunks can be joined
// again (see UTF8Joiner). null and an absent value decode to nil.
func RawString(lit []byte) ([]byte, error) {
	lit = bytes.TrimSpace(lit)
	if len(lit) == 0 || string(lit) == "null" {
		return nil, nil
	}
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return nil, errNotString
	}
	body := lit[1 : len(lit)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return append([]byte(nil), body...), nil
	}
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(body) {
			return nil, errNotString
		}
		switch body[i] {
		case '"', '\\', '/':
			out = append(out, body[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(body[i+1:])
			if !ok {
				return nil, errNotString
			}
			i += 4
			if utf16.IsSurrogate(r) {
				// A pair in two escapes: \uD83D\uDE00.
				if len(body) > i+6 && body[i+1] == '\\' && body[i+2] == 'u' {
					if r2, ok := hex4(body[i+3:]); ok {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							out = utf8.AppendRune(out, dec)
							i += 6
							continue
						}
					}
				}
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, errNotString
		}
	}
	return out, nil
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}

// UTF8Joiner turns a sequence of byte fragments into valid UTF-8 strings:
// an incomplete character at the end of a fragment is held back and
// emitted with the next one, so every delta A2 records is valid UTF-8 and
// the deltas concatenate to the full text. Bytes that can never form a
// character become U+FFFD.
type UTF8Joiner struct {
	pending []byte
}

// push returns the complete characters of pending+b.
func (j *UTF8Joiner) Push(b []byte) string {
	data := append(j.pending, b...)
	cut := len(data)
	for i := len(data) - 1; i >= 0 && i >= len(data)-utf8.UTFMax; i-- {
		if utf8.RuneStart(data[i]) {
			if !utf8.FullRune(data[i:]) {
				cut = i
			}
			break
		}
	}
	j.pending = append([]byte(nil), data[cut:]...)
	return strings.ToValidUTF8(string(data[:cut]), "\uFFFD")
}

// flush returns what is held back, as U+FFFD when it never completed.
func (j *UTF8Joiner) Flush() string {
	s := strings.ToValidUTF8(string(j.pending), "\uFFFD")
	j.pending = nil
	return s
}
