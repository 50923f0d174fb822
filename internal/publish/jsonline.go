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
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, m.Payload)
		b = append(b, `","payload_encoding":"base64"`...)
	case bytes.ContainsAny(m.Payload, "\r\n"):
		var buf bytes.Buffer
		if json.Compact(&buf, m.Payload) == nil {
			b = append(b, buf.Bytes()...)
		} else {
			b = append(b, m.Payload...)
		}
	default:
		b = append(b, m.Payload...)
	}
	b = append(b, `,"headers":`...)
	b = appendHeadersObject(b, m.Headers)
	b = append(b, `,"lsn":"`...)
	b = append(b, m.LSN.String()...)
	b = append(b, `","commit_lsn":"`...)
	b = append(b, m.CommitLSN.String()...)
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
