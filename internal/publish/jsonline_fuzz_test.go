package publish

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"maps"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/message"
)

// FuzzJSONLine checks AppendJSONLine on arbitrary messages: the output is
// exactly one line, ending in '\n', valid JSON, with no field but the
// format's, and it decodes back to the message: id, type, key, headers
// (strings with invalid UTF-8 come back with U+FFFD for each bad byte),
// lsn, commit_lsn, and the payload, compacted when it is JSON, base64 with
// "payload_encoding":"base64" when it is not.
//
// Seeds: testdata/fuzz/FuzzJSONLine.
func FuzzJSONLine(f *testing.F) {
	f.Add("0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31", "order.created", "k\"1", true, []byte("{\"a\":\n 1}"), 2, "z", "1", "a", "line\nbreak", uint64(0x16B3748), uint64(0x16B37A0))
	f.Add("x", "t", "", false, []byte{0, 0xff}, 0, "", "", "", "", uint64(1), uint64(2))
	f.Add("y", "t", "\u2028", true, []byte("[1,\r\n\t\"a\\\"\u00e9\"]"), 1, "k", "\x00\x1f\"", "", "", uint64(1<<32), uint64(1<<63))
	f.Fuzz(func(t *testing.T, id, typ, key string, hasKey bool, payload []byte, nHeaders int, k1, v1, k2, v2 string, lsn, commitLSN uint64) {
		m := &message.Message{ID: id, Type: typ, Key: key, HasKey: hasKey, Payload: payload, PayloadJSON: json.Valid(payload),
			LSN: pglogrepl.LSN(lsn), CommitLSN: pglogrepl.LSN(commitLSN)}
		if nHeaders&1 != 0 {
			m.Headers = map[string]string{k1: v1}
		}
		if nHeaders&2 != 0 {
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			m.Headers[k2] = v2
		}
		prefix := []byte("before\n")
		out := AppendJSONLine(bytes.Clone(prefix), m)
		if !bytes.HasPrefix(out, prefix) {
			t.Fatalf("changed the bytes it appends to: %q", out)
		}
		out = out[len(prefix):]
		if i := bytes.IndexByte(out, '\n'); i != len(out)-1 {
			t.Fatalf("not exactly one line ending in a newline: %q", out)
		}
		if !json.Valid(out) || !utf8.Valid(out) {
			t.Fatalf("not valid JSON text in UTF-8: %q", out)
		}
		var got struct {
			ID              string            `json:"id"`
			Type            string            `json:"type"`
			Key             *string           `json:"key"`
			Payload         json.RawMessage   `json:"payload"`
			PayloadEncoding string            `json:"payload_encoding"`
			Headers         map[string]string `json:"headers"`
			LSN             string            `json:"lsn"`
			CommitLSN       string            `json:"commit_lsn"`
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("decoding %q: %v", out, err)
		}
		if got.ID != fixUTF8(id) || got.Type != fixUTF8(typ) {
			t.Fatalf("id, type = %q, %q; want %q, %q", got.ID, got.Type, id, typ)
		}
		switch {
		case hasKey && (got.Key == nil || *got.Key != fixUTF8(key)):
			t.Fatalf("key = %v, want %q", got.Key, key)
		case !hasKey && got.Key != nil:
			t.Fatalf("key = %q, want null", *got.Key)
		}
		want := map[string]string{}
		for k, v := range m.Headers {
			want[fixUTF8(k)] = fixUTF8(v)
		}
		// Two keys with invalid UTF-8 may both become the same string;
		// Postgres text never holds invalid UTF-8, so that cannot happen.
		if len(want) == len(m.Headers) && !maps.Equal(got.Headers, want) {
			t.Fatalf("headers = %q, want %q", got.Headers, want)
		}
		if got.LSN != m.LSN.String() || got.CommitLSN != m.CommitLSN.String() {
			t.Fatalf("lsn, commit_lsn = %s, %s; want %s, %s", got.LSN, got.CommitLSN, m.LSN, m.CommitLSN)
		}
		if m.PayloadJSON && utf8.Valid(payload) {
			if got.PayloadEncoding != "" || !bytes.Equal(compact(t, got.Payload), compact(t, payload)) {
				t.Fatalf("payload = %s (%q), want %s", got.Payload, got.PayloadEncoding, payload)
			}
			return
		}
		var s string
		if err := json.Unmarshal(got.Payload, &s); err != nil || got.PayloadEncoding != "base64" {
			t.Fatalf("payload = %s (%q), want a base64 string", got.Payload, got.PayloadEncoding)
		}
		if b, err := base64.StdEncoding.DecodeString(s); err != nil || !bytes.Equal(b, payload) {
			t.Fatalf("payload decodes to %q (%v), want %q", b, err, payload)
		}
	})
}

// fixUTF8 is s as it comes back from JSON: each byte that is not part of
// valid UTF-8 replaced with U+FFFD.
func fixUTF8(s string) string { return string([]rune(s)) }

func compact(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("compacting %q: %v", b, err)
	}
	return buf.Bytes()
}
