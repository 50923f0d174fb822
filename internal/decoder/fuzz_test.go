package decoder

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/pgwiretest"
)

// Fuzz input: one byte choosing the mapping (fuzzMappings), then frames of
// WAL start LSN (8 bytes, big endian), length (4 bytes, big endian; a
// length past the end means "the rest") and that many bytes of pgoutput
// message, fed in order to one Decoder, as the replication stream does.

var fuzzMappings = []Mapping{
	{Schema: "public", Name: "outbox", Columns: layout.Default},
	{Schema: "app", Name: "events", Columns: layout.Columns{layout.ID: "event_id", layout.Type: "aggregatetype", layout.Payload: "payload"}},
}

type frame struct {
	lsn  pglogrepl.LSN
	data []byte
}

func splitFrames(in []byte) (Mapping, []frame) {
	if len(in) == 0 {
		return fuzzMappings[0], nil
	}
	m := fuzzMappings[int(in[0])%len(fuzzMappings)]
	in = in[1:]
	var frames []frame
	for len(in) >= 12 {
		lsn := pglogrepl.LSN(binary.BigEndian.Uint64(in))
		n := binary.BigEndian.Uint32(in[8:])
		in = in[12:]
		if uint64(n) > uint64(len(in)) {
			n = uint32(len(in))
		}
		frames = append(frames, frame{lsn, in[:n]})
		in = in[n:]
	}
	return m, frames
}

func joinFrames(mapping byte, frames ...frame) []byte {
	b := []byte{mapping}
	for _, f := range frames {
		b = binary.BigEndian.AppendUint64(b, uint64(f.lsn))
		b = binary.BigEndian.AppendUint32(b, uint32(len(f.data)))
		b = append(b, f.data...)
	}
	return b
}

// FuzzDecode: no input makes the decoder panic; every error is an *Error
// or wraps ErrProtocol, with valid UTF-8 text, and an *Error's row encodes
// to JSON that gives back its bytes; every Row message has a valid UTF-8 id
// (a UUID), type, key and headers, a JSON payload in valid UTF-8 when
// PayloadJSON, and does not alias the input (see checkFuzzRow for what is
// trusted to the column's type). DecodeOwned, aliasing every payload here,
// gives the same events and errors.
func FuzzDecode(f *testing.F) {
	defer func(n int) { aliasMin = n }(aliasMin)
	aliasMin = 0
	f.Fuzz(func(t *testing.T, in []byte) {
		m, frames := splitFrames(in)
		d, owned := New(m), New(m)
		for i, fr := range frames {
			oev, oerr := owned.DecodeOwned(fr.lsn, bytes.Clone(fr.data))
			data := bytes.Clone(fr.data)
			ev, err := d.Decode(fr.lsn, data)
			checkFuzzOwned(t, i, ev, err, oev, oerr)
			if err != nil {
				checkFuzzError(t, i, err)
				continue
			}
			if ev.Kind == Row {
				checkFuzzRow(t, i, ev.Msg, d.rels[binary.BigEndian.Uint32(data[1:5])], data)
			}
		}
	})
}

// checkFuzzOwned checks that DecodeOwned's event and error are Decode's.
func checkFuzzOwned(t *testing.T, i int, ev Event, err error, oev Event, oerr error) {
	if (err == nil) != (oerr == nil) || err != nil && err.Error() != oerr.Error() {
		t.Fatalf("frame %d: Decode: %v; DecodeOwned: %v", i, err, oerr)
	}
	var de, ode *Error
	if errors.As(err, &de) && errors.As(oerr, &ode) && !reflect.DeepEqual(de.Row, ode.Row) {
		t.Fatalf("frame %d: Decode's row %q, DecodeOwned's %q", i, de.Row, ode.Row)
	}
	if !reflect.DeepEqual(ev, oev) {
		t.Fatalf("frame %d: Decode gave %+v, DecodeOwned %+v", i, ev.Msg, oev.Msg)
	}
}

func checkFuzzError(t *testing.T, i int, err error) {
	var de *Error
	switch {
	case errors.As(err, &de):
		if !utf8.ValidString(de.ID) {
			t.Fatalf("frame %d: Error.ID %q is not valid UTF-8", i, de.ID)
		}
		b, merr := json.Marshal(de.Row)
		if merr != nil {
			t.Fatalf("frame %d: marshalling the row of %v: %v", i, err, merr)
		}
		var back map[string]any
		if err := json.Unmarshal(b, &back); err != nil || len(back) != len(de.Row) {
			t.Fatalf("frame %d: row JSON %s: %v", i, b, err)
		}
		for k, v := range de.Row {
			got, _ := back[k].(string)
			if o, ok := back[k].(map[string]any); ok {
				raw, _ := base64.StdEncoding.DecodeString(o["base64"].(string))
				got = string(raw)
			}
			if got != v {
				t.Fatalf("frame %d: row JSON %s gives back %s = %q, want %q", i, b, k, got, v)
			}
		}
	case errors.Is(err, ErrProtocol):
	default:
		t.Fatalf("frame %d: error %v (%T) is neither *Error nor ErrProtocol", i, err, err)
	}
	if !utf8.ValidString(err.Error()) {
		t.Fatalf("frame %d: error text %q is not valid UTF-8", i, err)
	}
}

// checkFuzzRow checks m, decoded from data for rel. The decoder trusts
// the server for what a column's type guarantees (a uuid column's text is
// a UUID, a jsonb column's is JSON: re-checking jsonb would cost four times
// the decoding); so does the check: for those it asks valid UTF-8 only.
func checkFuzzRow(t *testing.T, i int, m *message.Message, rel *relation, data []byte) {
	if m == nil {
		t.Fatalf("frame %d: Row without a message", i)
	}
	if !utf8.ValidString(m.ID) {
		t.Fatalf("frame %d: id %q is not valid UTF-8", i, m.ID)
	}
	if _, err := uuid.Parse(m.ID); rel.oid[colID] != oidUUID && (err != nil || len(m.ID) != 36) {
		t.Fatalf("frame %d: id %q is not a UUID", i, m.ID)
	}
	if m.Type == "" || !utf8.ValidString(m.Type) || !utf8.ValidString(m.Key) || m.Key != "" && !m.HasKey {
		t.Fatalf("frame %d: type %q, key %q (HasKey %v)", i, m.Type, m.Key, m.HasKey)
	}
	for k, v := range m.Headers {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			t.Fatalf("frame %d: header %q: %q is not valid UTF-8", i, k, v)
		}
	}
	if m.PayloadJSON && (rel.oid[colPayload] != oidJSONB && !json.Valid(m.Payload) || !utf8.Valid(m.Payload)) {
		t.Fatalf("frame %d: PayloadJSON but payload %q is not JSON text", i, m.Payload)
	}
	before := *m
	before.Payload = bytes.Clone(m.Payload)
	before.Headers = maps.Clone(m.Headers)
	for j := range data {
		data[j] ^= 0xA5
	}
	if !reflect.DeepEqual(&before, m) {
		t.Fatalf("frame %d: the message aliases the input", i)
	}
}

var updateSeeds = flag.Bool("update-seeds", false, "rewrite testdata/fuzz/FuzzDecode/seed-* from fuzzSeeds")

// fuzzSeeds are realistic sequences, and cut versions of them.
func fuzzSeeds() map[string][]byte {
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	rel := pgwiretest.Relation(16384, "public", "outbox", outboxCols...)
	textRel := pgwiretest.Relation(16384, "public", "outbox", col{"id", oidText}, col{"type", oidBPChar}, col{"key", oidVarchar},
		col{"payload", oidText}, col{"headers", oidJSON})
	byteaRel := pgwiretest.Relation(16384, "public", "outbox", col{"id", oidVarchar}, col{"type", oidVarchar}, col{"key", oidUUID},
		col{"payload", oidBytea}, col{"headers", oidJSONB})
	orders := pgwiretest.Relation(16390, "public", "orders", col{"id", 23}, col{"note", oidText})
	row := func(typ, payload, headers string) []byte {
		return pgwiretest.Insert(16384, s(id1), s(typ), s("order-7"), s(payload), s(headers), s("2026-12-02 10:00:00+00"))
	}
	tx := func(rows ...[]byte) []frame {
		fs := []frame{{0x1000, pgwiretest.Begin(0x1F00, at, 700)}}
		for i, r := range rows {
			fs = append(fs, frame{pglogrepl.LSN(0x1100 + i*0x40), r})
		}
		return append(fs, frame{0x1F30, pgwiretest.Commit(0x1F00, 0x1F30, at)})
	}
	seq := func(mapping byte, head []frame, rows ...[]byte) []byte {
		return joinFrames(mapping, append(head, tx(rows...)...)...)
	}
	seeds := map[string][]byte{
		"outbox-transaction": seq(0, []frame{{0xF00, rel}},
			row("order.created", `{"total": 12, "lines": [{"sku": "A-1"}]}`, `{"traceparent": "00-abc-def-01", "n": 3}`),
			pgwiretest.Insert(16384, s(id1), s("order.paid"), nil, s(`[1,2]`), nil, nil)),
		"outbox-text-columns": seq(0, []frame{{0xF00, textRel}},
			pgwiretest.Insert(16384, s(id1), s("order.created   "), s("k"), s(`{"a": "é"}`), s(`{"h": "\ud83d\ude00"}`))),
		"outbox-bytea-payload": seq(0, []frame{{0xF00, byteaRel}},
			pgwiretest.Insert(16384, s(id1), s("blob"), s(id1), s(`\x00ff22`), nil),
			pgwiretest.Insert(16384, s(id1), s("json"), nil, s(`\x7b7d`), s(`{}`))),
		"other-table": seq(0, []frame{{0xE00, orders}, {0xF00, rel}},
			pgwiretest.Insert(16390, s("42"), s("hello")),
			row("order.created", `{}`, `{}`)),
		"logical-messages": joinFrames(0, append([]frame{{0xF00, pgwiretest.Message(0xF00, false, HeartbeatPrefix, "")}, {0xF00, rel}},
			tx(pgwiretest.Message(0x1100, true, "app", ""), row("t", `{}`, `{}`))...)...),
		"relation-resent": seq(0, []frame{{0xF00, rel}, {0xF10, textRel}, {0xF20, rel}}, row("t", `{}`, `{}`)),
		"invalid-rows": seq(0, []frame{{0xF00, textRel}},
			pgwiretest.Insert(16384, s("42"), s("t"), nil, s(`{}`), nil),
			pgwiretest.Insert(16384, s(id1), s("bad\xff"), nil, s(`{}`), nil),
			pgwiretest.Insert(16384, s(id1), s("t"), nil, s(`{"a": "\xc3"}`), s(`{"h": "\ud800"}`)),
			pgwiretest.Insert(16384, s(id1), s("t"), nil, s(`not json`), s(`[1]`))),
		"events-mapping": joinFrames(1, append([]frame{{0xF00, pgwiretest.Relation(5, "app", "events",
			col{"event_id", oidUUID}, col{"aggregatetype", oidText}, col{"payload", oidJSON})}},
			tx(pgwiretest.Insert(5, s(id1), s("Order"), s(`{"x": true}`)))...)...),
		"missing-column": joinFrames(1, append([]frame{{0xF00, pgwiretest.Relation(5, "app", "events",
			col{"event_id", oidUUID}, col{"kind", oidText}, col{"payload", oidJSON})}},
			tx(pgwiretest.Insert(5, s(id1), s("Order"), s(`{}`)))...)...),
		"unusable-type": seq(0, []frame{{0xF00, pgwiretest.Relation(16384, "public", "outbox", col{"id", oidUUID}, col{"type", oidText},
			col{"key", oidText}, col{"payload", 23}, col{"headers", oidJSONB})}},
			pgwiretest.Insert(16384, s(id1), s("t"), nil, s("1"), nil)),
	}
	// Each kind of message cut short, after a good start.
	for kind, m := range map[string][]byte{
		"relation": rel, "begin": pgwiretest.Begin(0x1F00, at, 700), "commit": pgwiretest.Commit(0x1F00, 0x1F30, at),
		"message": pgwiretest.Message(0x1100, false, HeartbeatPrefix, ""), "insert": row("t", `{"a": 1}`, `{"h": "v"}`),
	} {
		for _, n := range []int{1, len(m) / 2, len(m) - 1} {
			seeds[fmt.Sprintf("truncated-%s-%d", kind, n)] = joinFrames(0,
				frame{0xF00, rel}, frame{0x1000, pgwiretest.Begin(0x1F00, at, 700)}, frame{0x1100, m[:n]})
		}
	}
	return seeds
}

// TestFuzzDecodeSeedsAreCurrent: the seed corpus in testdata is what
// fuzzSeeds builds (go test -run FuzzDecodeSeeds -update-seeds rewrites
// it), and the realistic seeds decode as meant, so that the fuzzer starts
// from rows, invalid rows and protocol errors alike.
func TestFuzzDecodeSeedsAreCurrent(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	seeds := fuzzSeeds()
	// rows, invalid rows (*Error), protocol errors per seed.
	want := map[string][3]int{
		"outbox-transaction": {2, 0, 0}, "outbox-text-columns": {1, 0, 0}, "outbox-bytea-payload": {2, 0, 0},
		"other-table": {1, 0, 0}, "logical-messages": {1, 0, 0}, "relation-resent": {1, 0, 0},
		"invalid-rows": {0, 4, 0}, "events-mapping": {1, 0, 0}, "missing-column": {0, 1, 0}, "unusable-type": {0, 1, 0},
	}
	for name, seed := range seeds {
		m, frames := splitFrames(seed)
		d := New(m)
		var got [3]int
		for _, fr := range frames {
			ev, err := d.Decode(fr.lsn, fr.data)
			var de *Error
			switch {
			case errors.As(err, &de):
				got[1]++
			case err != nil:
				got[2]++
			case ev.Kind == Row:
				got[0]++
			}
		}
		w, ok := want[name]
		if !ok {
			w = [3]int{0, 0, 1} // truncated-*
		}
		if got != w {
			t.Errorf("seed %s: %d rows, %d invalid rows, %d protocol errors; want %v", name, got[0], got[1], got[2], w)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(seeds)) {
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", seeds[name])
		path := filepath.Join(dir, "seed-"+name)
		if *updateSeeds {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Fatalf("%s is missing or stale (%v): run go test ./internal/decoder -run FuzzDecodeSeeds -update-seeds", path, err)
		}
	}
}
