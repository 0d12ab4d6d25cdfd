// Package jsonstr writes JSON strings byte for byte as encoding/json does,
// without its reflection, for the common case: protocol's progress events
// and the gateway's event envelopes. Strings it does not take go to
// encoding/json (FuzzDeltaChunk and FuzzEnvelope compare with it).
package jsonstr

import "unicode/utf8"

// Append appends s as encoding/json writes a string (escaping HTML
// characters, as json.Marshal does), and reports true, for strings of valid
// UTF-8 whose only characters to escape are quotes, backslashes, tabs,
// newlines, carriage returns and <, >, &. For anything else (other control
// characters, invalid UTF-8, U+2028, U+2029) it returns dst as it was and
// false: the caller encodes s with encoding/json.
func Append(dst []byte, s string) ([]byte, bool) {
	start := len(dst)
	dst = append(dst, '"')
	last := 0 // s[last:i] is still to copy
	for i := 0; i < len(s); {
		b := s[i]
		if b >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
				return dst[:start], false
			}
			i += size
			continue
		}
		var esc string
		switch b {
		case '"':
			esc = `\"`
		case '\\':
			esc = `\\`
		case '\n':
			esc = `\n`
		case '\r':
			esc = `\r`
		case '\t':
			esc = `\t`
		case '<':
			esc = `\u003c`
		case '>':
			esc = `\u003e`
		case '&':
			esc = `\u0026`
		default:
			if b < 0x20 {
				return dst[:start], false
			}
			i++
			continue
		}
		dst = append(dst, s[last:i]...)
		dst = append(dst, esc...)
		i++
		last = i
	}
	dst = append(dst, s[last:]...)
	return append(dst, '"'), true
}
