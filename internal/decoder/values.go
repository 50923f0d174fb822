package decoder

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/walpost/walpost/internal/layout"
)

// timestampLayouts are the forms of timestamptz and timestamp that
// PostgreSQL writes with DateStyle ISO (the replication connection sets
// it): the offset as +hh, +hh:mm or +hh:mm:ss, or none (timestamp, read
// as UTC).
var timestampLayouts = []string{
	"2006-01-02 15:04:05.999999999Z07",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999Z07:00:00",
	"2006-01-02 15:04:05.999999999",
}

// parseTimestamp reads a timestamp column's text value, in UTC.
func parseTimestamp(v []byte) (time.Time, error) {
	s := string(v)
	for _, l := range timestampLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%s is not a timestamp walpost can publish (infinite, BC, or not in DateStyle ISO)", excerpt(v))
}

// checkPayload checks v, the payload column's value, of type oid.
func checkPayload(oid uint32, v []byte, text func(layout.Role) error) error {
	switch oid {
	case oidJSONB:
		// Valid JSON by construction, but in a SQL_ASCII database its
		// strings may hold any bytes.
		return text(colPayload)
	case oidBytea:
		if err := checkBytea(v); err != nil {
			return fmt.Errorf("payload: %v", err)
		}
		return nil
	default:
		if err := text(colPayload); err != nil {
			return err
		}
		if !json.Valid(v) {
			return fmt.Errorf("payload is not valid JSON (%s)", excerpt(v))
		}
		return nil
	}
}

// invalidUTF8 is the error for a value of column col (playing role) that
// is not valid UTF-8; it names the first invalid byte and where it is.
func invalidUTF8(role, col string, v []byte) error {
	off := 0
	for off < len(v) {
		r, size := utf8.DecodeRune(v[off:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		off += size
	}
	b := byte(0)
	if off < len(v) {
		b = v[off]
	}
	return fmt.Errorf("%s: column %q is not valid UTF-8 (byte 0x%02x at offset %d); the database encoding is likely SQL_ASCII: fix the producer or convert the text",
		role, col, b, off)
}

// parseHeaders reads a JSON object. String values are kept; other values
// are kept as their JSON text, so nothing is dropped. b must be valid
// UTF-8; a \u escape that stands for no character (an unpaired UTF-16
// surrogate, which encoding/json would replace with U+FFFD) is an error.
func parseHeaders(b []byte) (map[string]string, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("not a JSON object of strings (%s)", excerpt(b))
	}
	if raw == nil {
		return nil, nil
	}
	if err := checkSurrogates(b); err != nil {
		return nil, err
	}
	h := make(map[string]string, len(raw))
	for k, v := range raw {
		var s string
		if len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &s) == nil {
			h[k] = s
		} else {
			h[k] = string(v)
		}
	}
	return h, nil
}

// checkSurrogates reports a \uXXXX escape in the valid JSON text b that is
// half of a UTF-16 surrogate pair without its other half.
func checkSurrogates(b []byte) error {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		// Valid JSON: a backslash is inside a string and starts an escape.
		if i+1 < len(b) && b[i+1] != 'u' {
			i++
			continue
		}
		hi, ok := hex4(b, i+2)
		if !ok {
			return nil // not valid JSON after all: not this check's business
		}
		switch {
		case hi >= 0xD800 && hi < 0xDC00:
			lo, ok := hex4(b, i+8)
			if !ok || i+7 >= len(b) || b[i+6] != '\\' || b[i+7] != 'u' || lo < 0xDC00 || lo >= 0xE000 {
				return fmt.Errorf(`\u%04x at offset %d is an unpaired UTF-16 surrogate: it stands for no character; fix the producer`, hi, i)
			}
			i += 11
		case hi >= 0xDC00 && hi < 0xE000:
			return fmt.Errorf(`\u%04x at offset %d is an unpaired UTF-16 surrogate: it stands for no character; fix the producer`, hi, i)
		default:
			i += 5
		}
	}
	return nil
}

// hex4 reads the four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i < 0 || len(b)-i < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[i:i+4]), 16, 16)
	return rune(v), err == nil
}

// checkBytea checks that v is bytea's text output in hex format
// ("\x0a1b..."), which setPayload decodes.
func checkBytea(v []byte) error {
	if len(v) < 2 || v[0] != '\\' || v[1] != 'x' {
		return errors.New("bytea is not in hex output format; set bytea_output = 'hex'")
	}
	for _, c := range v[2:] {
		if hexValue[c] < 0 {
			return fmt.Errorf("bytea: %v", hex.InvalidByteError(c))
		}
	}
	if len(v)%2 == 1 {
		return fmt.Errorf("bytea: %v", hex.ErrLength)
	}
	return nil
}

// unhex decodes the hex digits src, which checkBytea checked, into dst,
// len(src)/2 bytes. dst may start where src does or before: each byte is
// written after the digits it comes from are read, and at or before them.
func unhex(dst, src []byte) {
	for i := range dst {
		dst[i] = byte(hexValue[src[2*i]])<<4 | byte(hexValue[src[2*i+1]])
	}
}

// hexValue is each byte's value as a hex digit, -1 for a byte that is not
// one.
var hexValue = func() (t [256]int8) {
	for i := range t {
		t[i] = -1
	}
	for i, c := range "0123456789abcdef" {
		t[c] = int8(i)
	}
	for i, c := range "ABCDEF" {
		t[c] = int8(10 + i)
	}
	return t
}()

// printable returns s, or s quoted with Go escapes when it is not valid
// UTF-8, for error texts.
func printable(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strconv.Quote(s)
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

func excerpt(b []byte) string {
	const max = 60
	if len(b) > max {
		return fmt.Sprintf("%q… (%d bytes)", b[:max], len(b))
	}
	return fmt.Sprintf("%q", b)
}
