package publish

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"unicode/utf8"

	"github.com/walpost/walpost/internal/message"
)

// AppendJSONLine appends m as one line of the file and stdout sinks'
// format (docs/design.md, "Contracts"), newline included:
//
//	{"id":"…","type":"…","key":"…","payload":<the JSON payload>,"headers":{…},"lsn":"0/16B3748","commit_lsn":"0/16B37A0"}
//
// key is null when the outbox key is NULL; headers is {} when the headers
// column is NULL, with keys sorted. A payload that is not JSON (a bytea
// column holding other bytes) is written as a base64 string and the line
// gets "payload_encoding":"base64"; so is a payload marked JSON that is
// not valid UTF-8, which JSON text must be. A JSON payload spread over
// several lines (a json column keeps the text as written) is compacted so
// that every message is exactly one line.
func AppendJSONLine(b []byte, m *message.Message) []byte {
	b, form := appendJSONLineHead(b, m)
	switch form {
	case payloadBase64:
		b = base64.StdEncoding.AppendEncode(b, m.Payload)
	case payloadCompact:
		b = appendCompact(b, m.Payload)
	default:
		b = append(b, m.Payload...)
	}
	return appendJSONLineTail(b, m, form)
}

// payloadForm is how a payload goes into its line.
type payloadForm uint8

const (
	payloadVerbatim payloadForm = iota // the JSON as it is
	payloadBase64                      // a base64 string
	payloadCompact                     // JSON over several lines, compacted
)

// OutOfLineMin is the payload size from which AppendJSONLineOut leaves a
// payload out of the line it builds, for the writer to write it from the
// message: a large message is then not copied into a line first.
const OutOfLineMin = 64 << 10

// AppendJSONLineOut appends m's line to b as AppendJSONLine does, but
// leaves out a payload of OutOfLineMin bytes or more that goes in verbatim
// or in base64 (out is true): the line is then b[:at], the payload (in
// base64 when b64 is true), and the rest of b. The file and stdout sinks
// (publish/file) write such a payload from the message.
func AppendJSONLineOut(b []byte, m *message.Message) (_ []byte, at int, b64, out bool) {
	if len(m.Payload) < OutOfLineMin {
		return AppendJSONLine(b, m), 0, false, false
	}
	b, form := appendJSONLineHead(b, m)
	if form == payloadCompact {
		return appendJSONLineTail(appendCompact(b, m.Payload), m, form), 0, false, false
	}
	at = len(b)
	return appendJSONLineTail(b, m, form), at, form == payloadBase64, true
}

// appendCompact appends the JSON text p without its insignificant white
// space, or as it is should it not be JSON.
func appendCompact(b, p []byte) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, p) == nil {
		return append(b, buf.Bytes()...)
	}
	return append(b, p...)
}

// appendJSONLineHead appends m's line up to its payload (for base64, up
// to the opening quote) and returns how the payload goes in.
func appendJSONLineHead(b []byte, m *message.Message) ([]byte, payloadForm) {
	b = append(b, `{"id":`...)
	b = appendString(b, m.ID)
	b = append(b, `,"type":`...)
	b = appendString(b, m.Type)
	b = append(b, `,"key":`...)
	if m.HasKey {
		b = appendString(b, m.Key)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"payload":`...)
	switch {
	case !m.PayloadJSON || !utf8.Valid(m.Payload):
		// JSON text is UTF-8 (RFC 8259): JSON-shaped bytes that are not
		// (the decoder never marks them JSON) would make the line
		// unreadable to strict parsers.
		return append(b, '"'), payloadBase64
	case bytes.ContainsAny(m.Payload, "\r\n"):
		return b, payloadCompact
	default:
		return b, payloadVerbatim
	}
}

// appendJSONLineTail appends the rest of m's line after its payload, which
// went in as form says.
func appendJSONLineTail(b []byte, m *message.Message, form payloadForm) []byte {
	if form == payloadBase64 {
		b = append(b, `","payload_encoding":"base64"`...)
	}
	b = append(b, `,"headers":`...)
	b = appendHeadersObject(b, DataHeaders(m))
	b = append(b, `,"lsn":"`...)
	b = appendLSN(b, uint64(m.LSN))
	b = append(b, `","commit_lsn":"`...)
	b = appendLSN(b, uint64(m.CommitLSN))
	return append(b, "\"}\n"...)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendLSN appends lsn as pglogrepl.LSN.String writes it ("16/B374D848":
// upper-case hex, no leading zeros), without fmt's cost per message.
func appendLSN(b []byte, lsn uint64) []byte {
	b = appendHex(b, lsn>>32)
	b = append(b, '/')
	return appendHex(b, lsn&0xffffffff)
}

func appendHex(b []byte, v uint64) []byte {
	const digits = "0123456789ABCDEF"
	var buf [16]byte
	i := len(buf)
	for {
		i--
		buf[i] = digits[v&0xf]
		v >>= 4
		if v == 0 {
			break
		}
	}
	return append(b, buf[i:]...)
}
