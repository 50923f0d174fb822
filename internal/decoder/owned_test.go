package decoder

import (
	"bytes"
	"encoding/hex"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/walpost/walpost/internal/pgwiretest"
)

// within reports whether b's bytes lie inside buf's.
func within(b, buf []byte) bool {
	if len(b) == 0 || len(buf) == 0 {
		return false
	}
	start, end := uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&buf[0]))+uintptr(len(buf))
	p := uintptr(unsafe.Pointer(&b[0]))
	return p >= start && p+uintptr(len(b)) <= end
}

// ownedDecoder returns a decoder in a transaction of the outbox whose
// payload column has type oid.
func ownedDecoder(t *testing.T, oid uint32) *Decoder {
	t.Helper()
	d := newDecoder()
	mustDecode(t, d, 1, pgwiretest.Relation(16384, "public", "outbox", col{"id", oidUUID}, col{"type", oidText}, col{"key", oidText},
		col{"payload", oid}, col{"headers", oidJSONB}, col{"created_at", 1184}))
	mustDecode(t, d, 2, pgwiretest.Begin(9, time.Now(), 1))
	return d
}

// TestDecodeOwnedKeepsALargePayloadInPlace: DecodeOwned does not copy a
// payload of aliasMin bytes or more (a bytea one is decoded over its own
// text), copies a smaller one, and gives the message Decode gives.
func TestDecodeOwnedKeepsALargePayloadInPlace(t *testing.T) {
	big := `{"pad": "` + strings.Repeat("x", aliasMin) + `"}`
	cases := []struct {
		name    string
		oid     uint32
		value   string
		payload string
		alias   bool
	}{
		{"large jsonb", oidJSONB, big, big, true},
		{"large json", oidJSON, big, big, true},
		{"large bytea", oidBytea, `\x` + hex.EncodeToString([]byte(big)), big, true},
		{"small jsonb", oidJSONB, `{"a": 1}`, `{"a": 1}`, false},
		{"small bytea", oidBytea, `\x7b7d`, `{}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := pgwiretest.Insert(16384, s(id1), s("t"), nil, s(c.value), nil, nil)
			want := mustDecode(t, ownedDecoder(t, c.oid), 3, bytes.Clone(data))
			d := ownedDecoder(t, c.oid)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			ev, err := d.DecodeOwned(3, data)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			if n := after.TotalAlloc - before.TotalAlloc; c.alias && n >= uint64(len(c.payload)) {
				t.Fatalf("DecodeOwned allocated %d bytes for a payload of %d", n, len(c.payload))
			}
			if string(ev.Msg.Payload) != c.payload || !ev.Msg.PayloadJSON {
				t.Fatalf("payload %.40q… (%d bytes), JSON %v; want %.40q… (%d bytes)", ev.Msg.Payload, len(ev.Msg.Payload), ev.Msg.PayloadJSON, c.payload, len(c.payload))
			}
			if string(want.Msg.Payload) != c.payload {
				t.Fatalf("Decode gave another payload: %.40q…", want.Msg.Payload)
			}
			if got := within(ev.Msg.Payload, data); got != c.alias {
				t.Fatalf("payload in the input's bytes: %v, want %v", got, c.alias)
			}
			if cap(ev.Msg.Payload) != len(ev.Msg.Payload) {
				t.Fatalf("payload's capacity %d exceeds its length %d: an append would write into the input", cap(ev.Msg.Payload), len(ev.Msg.Payload))
			}
		})
	}
}

// TestDecodeOwnedLeavesAnInvalidRowAsSent: a large bytea payload is
// decoded in place only once the row is known to be good: the row of an
// invalid one (headers that are not an object) holds the values as sent.
func TestDecodeOwnedLeavesAnInvalidRowAsSent(t *testing.T) {
	value := `\x` + strings.Repeat("7b", aliasMin)
	data := pgwiretest.Insert(16384, s(id1), s("t"), nil, s(value), s(`[1]`), nil)
	_, err := ownedDecoder(t, oidBytea).DecodeOwned(3, data)
	var de *Error
	if !errors.As(err, &de) {
		t.Fatalf("error %v, want an *Error", err)
	}
	if de.Row["payload"] != value || de.Row["headers"] != `[1]` {
		t.Fatalf("row payload %.40q… (%d bytes), headers %q: not as sent", de.Row["payload"], len(de.Row["payload"]), de.Row["headers"])
	}
	bad := pgwiretest.Insert(16384, s(id1), s("t"), nil, s(value+"zz"), nil, nil)
	_, err = ownedDecoder(t, oidBytea).DecodeOwned(3, bad)
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "invalid byte") || de.Row["payload"] != value+"zz" {
		t.Fatalf("bad hex: error %v", err)
	}
}
