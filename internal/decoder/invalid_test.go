package decoder

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/pgwiretest"
)

// TestDecodeInvalidUTF8IsAnInvalidRow: text that is not valid UTF-8 (a
// SQL_ASCII database stores any bytes) in any mapped column is an *Error
// naming the column and its role and where the bad byte is, never a
// message with raw bytes or U+FFFD in it.
func TestDecodeInvalidUTF8IsAnInvalidRow(t *testing.T) {
	cols := func(idType, payloadType, headersType uint32) []col {
		return []col{{"id", idType}, {"type", oidText}, {"key", oidText}, {"payload", payloadType}, {"headers", headersType}}
	}
	std := cols(oidUUID, oidJSONB, oidJSONB)
	good := []*string{s(id1), s("order.created"), s("k"), s(`{"a":1}`), s(`{"h":"v"}`)}
	with := func(i int, v string) []*string {
		vals := append([]*string(nil), good...)
		vals[i] = s(v)
		return vals
	}
	cases := []struct {
		name string
		cols []col
		vals []*string
		col  string // the column named as invalid
		want string
	}{
		{"id", cols(oidText, oidJSONB, oidJSONB), with(0, "0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a3\xff"), "id",
			`columns.id: column "id" is not valid UTF-8 (byte 0xff at offset 35)`},
		{"type", std, with(1, "bad\xff"), "type",
			`columns.type: column "type" is not valid UTF-8 (byte 0xff at offset 3); the database encoding is likely SQL_ASCII: fix the producer or convert the text`},
		{"type truncated sequence", std, with(1, "caf\xc3"), "type",
			`columns.type: column "type" is not valid UTF-8 (byte 0xc3 at offset 3)`},
		{"key", std, with(2, "\xe9t\xe9"), "key",
			`columns.key: column "key" is not valid UTF-8 (byte 0xe9 at offset 0)`},
		{"header value", std, with(4, "{\"h\": \"\xfe\"}"), "headers",
			`columns.headers: column "headers" is not valid UTF-8 (byte 0xfe at offset 7)`},
		{"header key", std, with(4, "{\"\x80\": \"v\"}"), "headers",
			`columns.headers: column "headers" is not valid UTF-8 (byte 0x80 at offset 2)`},
		{"headers of type json", cols(oidUUID, oidJSONB, oidJSON), with(4, "{\"h\": \"\xff\"}"), "headers",
			`columns.headers: column "headers" is not valid UTF-8`},
		{"jsonb payload", std, with(3, "{\"a\": \"\xff\"}"), "payload",
			`columns.payload: column "payload" is not valid UTF-8 (byte 0xff at offset 7)`},
		{"json payload", cols(oidUUID, oidJSON, oidJSONB), with(3, "{\"a\": \"x\xff\"}"), "payload",
			`columns.payload: column "payload" is not valid UTF-8 (byte 0xff at offset 8)`},
		{"text payload", cols(oidUUID, oidText, oidJSONB), with(3, "\"\xff\""), "payload",
			`columns.payload: column "payload" is not valid UTF-8 (byte 0xff at offset 1)`},
		{"varchar payload", cols(oidUUID, oidVarchar, oidJSONB), with(3, "[\"\xc0\xaf\"]"), "payload",
			`columns.payload: column "payload" is not valid UTF-8 (byte 0xc0 at offset 2)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := newDecoder()
			mustDecode(t, d, 1, pgwiretest.Relation(1, "public", "outbox", c.cols...))
			mustDecode(t, d, 2, pgwiretest.Begin(0x99, time.Now(), 1))
			ev, err := d.Decode(0x120, pgwiretest.Insert(1, c.vals...))
			var de *Error
			if !errors.As(err, &de) {
				t.Fatalf("Decode = %+v, %v; want *Error", ev.Msg, err)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "0/120") {
				t.Fatalf("err = %q\nwant it to contain %q and the LSN", err, c.want)
			}
			if !utf8.ValidString(err.Error()) || !utf8.ValidString(de.ID) {
				t.Fatalf("error text or id is not valid UTF-8: %q, id %q", err, de.ID)
			}
			if de.Table {
				t.Fatal("Table = true: a row's bytes are the row's fault, not the table's")
			}
			if wantID := map[bool]string{true: "", false: id1}[c.col == "id"]; de.ID != wantID {
				t.Fatalf("ID = %q, want %q", de.ID, wantID)
			}
			// The row, as the dead-letter table gets it: the bad value
			// base64, nothing replaced.
			b, err := json.Marshal(de.Row)
			if err != nil {
				t.Fatal(err)
			}
			var row map[string]any
			if err := json.Unmarshal(b, &row); err != nil {
				t.Fatalf("row JSON %s: %v", b, err)
			}
			bad := map[string]any{"base64": base64.StdEncoding.EncodeToString([]byte(de.Row[c.col]))}
			if !reflect.DeepEqual(row[c.col], bad) {
				t.Fatalf("row JSON %s: %s is %v, want %v", b, c.col, row[c.col], bad)
			}
			for i, cl := range c.cols {
				if cl.Name != c.col && row[cl.Name] != *c.vals[i] {
					t.Fatalf("row JSON %s: %s is %v, want %q", b, cl.Name, row[cl.Name], *c.vals[i])
				}
			}
		})
	}
}

func TestDecodeByteaPayloadThatIsNotUTF8IsBytesNotJSON(t *testing.T) {
	d := New(Mapping{Schema: "public", Name: "outbox", Columns: layout.Columns{layout.ID: "id", layout.Type: "type", layout.Payload: "payload"}})
	mustDecode(t, d, 1, pgwiretest.Relation(1, "public", "outbox", col{"id", oidUUID}, col{"type", oidText}, col{"payload", oidBytea}))
	mustDecode(t, d, 2, pgwiretest.Begin(9, time.Now(), 1))
	// "\xff" with its quotes: encoding/json's json.Valid accepts it.
	ev := mustDecode(t, d, 3, pgwiretest.Insert(1, s(id1), s("t"), s(`\x22ff22`)))
	if string(ev.Msg.Payload) != "\"\xff\"" || ev.Msg.PayloadJSON {
		t.Fatalf("got payload %q, PayloadJSON %v; want the bytes, not JSON", ev.Msg.Payload, ev.Msg.PayloadJSON)
	}
	ev = mustDecode(t, d, 4, pgwiretest.Insert(1, s(id1), s("t"), s(`\x22c3a922`)))
	if string(ev.Msg.Payload) != `"é"` || !ev.Msg.PayloadJSON {
		t.Fatalf("got payload %q, PayloadJSON %v; want JSON", ev.Msg.Payload, ev.Msg.PayloadJSON)
	}
}

// TestDecodeHeadersWithUnpairedSurrogateAreInvalid: encoding/json would
// turn "\ud800" into U+FFFD silently; the row is invalid instead. A pair is
// a character and passes.
func TestDecodeHeadersWithUnpairedSurrogateAreInvalid(t *testing.T) {
	for _, c := range []struct{ headers, want string }{
		{`{"h": "\ud800"}`, `\ud800 at offset 7 is an unpaired UTF-16 surrogate`},
		{`{"h": "x\uDC00y"}`, `\udc00 at offset 8 is an unpaired UTF-16 surrogate`},
		{`{"\ud83d\ud83d": "v"}`, `\ud83d at offset 2 is an unpaired UTF-16 surrogate`},
		{`{"h": "\ud83d\ude00", "\\ud800": "\u00e9"}`, ""},
	} {
		d := newDecoder()
		mustDecode(t, d, 1, pgwiretest.Relation(1, "public", "outbox", outboxCols...))
		mustDecode(t, d, 2, pgwiretest.Begin(9, time.Now(), 1))
		ev, err := d.Decode(3, pgwiretest.Insert(1, s(id1), s("t"), nil, s("{}"), s(c.headers), nil))
		if c.want == "" {
			want := map[string]string{"h": "😀", `\ud800`: "é"}
			if err != nil || !reflect.DeepEqual(ev.Msg.Headers, want) {
				t.Fatalf("headers %s: got %v, %v; want %v", c.headers, ev.Msg, err, want)
			}
			continue
		}
		var de *Error
		if !errors.As(err, &de) || !strings.Contains(err.Error(), "headers: "+c.want) {
			t.Fatalf("headers %s: err = %v, want *Error with %q", c.headers, err, c.want)
		}
	}
}

func TestRowValuesMarshalJSONKeepsEveryByte(t *testing.T) {
	row := RowValues{"type": "bad\xff", "payload": `{"a": "<é>"}`, "id": id1}
	b, err := json.Marshal(row)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"` + id1 + `","payload":"{\"a\": \"\u003cé\u003e\"}","type":{"base64":"YmFk/w=="}}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	if b, err := json.Marshal(RowValues(nil)); err != nil || string(b) != "null" {
		t.Fatalf("nil row: %s, %v", b, err)
	}
	if _, err := json.Marshal(RowValues{"\xff": "v"}); err == nil {
		t.Fatal("a column name that is not UTF-8 was encoded")
	}
}

// TestDecodeMalformedNeverPanics: every prefix of every message kind the
// decoder parses is either decoded or an error wrapping ErrProtocol that
// names the kind and the LSN (pglogrepl's parsers index past the end of
// truncated Relation and logical decoding Message messages).
func TestDecodeMalformedNeverPanics(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	msgs := map[string][]byte{
		"Relation":                 pgwiretest.Relation(1, "public", "outbox", outboxCols...),
		"Begin":                    pgwiretest.Begin(0x1F0, at, 7),
		"Commit":                   pgwiretest.Commit(0x1F0, 0x200, at),
		"logical decoding Message": pgwiretest.Message(0x500, false, HeartbeatPrefix, ""),
		"Insert":                   pgwiretest.Insert(1, s(id1), s("t"), s("k"), s("{}"), nil, nil),
	}
	for kind, full := range msgs {
		for n := 1; n < len(full); n++ {
			d := newDecoder()
			mustDecode(t, d, 1, pgwiretest.Relation(1, "public", "outbox", outboxCols...))
			mustDecode(t, d, 2, pgwiretest.Begin(9, at, 1))
			ev, err := d.Decode(0x16B3748, full[:n])
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("%s cut to %d of %d bytes: got %+v, %v; want ErrProtocol", kind, n, len(full), ev, err)
			}
			if !strings.Contains(err.Error(), kind+" at 0/16B3748") {
				t.Fatalf("%s cut to %d bytes: err %q does not name the kind and LSN", kind, n, err)
			}
		}
		d := newDecoder()
		mustDecode(t, d, 1, pgwiretest.Relation(1, "public", "outbox", outboxCols...))
		mustDecode(t, d, 2, pgwiretest.Begin(9, at, 1))
		mustDecode(t, d, 3, full)
	}
}

func TestDecodeInsertWithOtherColumnCountThanItsRelationIsProtocolError(t *testing.T) {
	d := newDecoder()
	mustDecode(t, d, 1, pgwiretest.Relation(1, "public", "outbox", outboxCols...))
	mustDecode(t, d, 2, pgwiretest.Begin(9, time.Now(), 1))
	for _, vals := range [][]*string{{s(id1), s("t"), nil, s("{}"), nil}, {s(id1), s("t"), nil, s("{}"), nil, nil, nil}} {
		if _, err := d.Decode(3, pgwiretest.Insert(1, vals...)); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "columns, its Relation message 6") {
			t.Fatalf("%d columns: err = %v, want ErrProtocol", len(vals), err)
		}
	}
}

// TestUnusableTypeErrorNamesExactlyTheAcceptedTypes: the error text is
// derived from the table of accepted types, so it cannot drift from it.
func TestUnusableTypeErrorNamesExactlyTheAcceptedTypes(t *testing.T) {
	names := layout.Default
	names[layout.Time], names[layout.SentAt] = "created_at", "sent_at"
	names[layout.DeliverAt], names[layout.ExpiresAt] = "deliver_at", "expires_at"
	for role := range layout.NumRoles {
		var listed []string
		for _, oid := range accepted[role] {
			if typeNames[oid] == "" {
				t.Fatalf("%s: accepted type oid %d has no name", role.Field(), oid)
			}
			listed = append(listed, typeNames[oid])
			r := &relation{idx: [layout.NumRoles]int{0, 1, 2, 3, 4, 5, 6, 7, 8}, oid: [layout.NumRoles]uint32{oidUUID, oidText, oidText, oidJSONB, oidJSONB, oidTSTZ, oidTS, oidTSTZ, oidTS}}
			r.oid[role] = oid
			if err := checkTypes(r, names); err != nil {
				t.Fatalf("%s of type %s: %v", role.Field(), typeNames[oid], err)
			}
		}
		r := &relation{idx: [layout.NumRoles]int{0, 1, 2, 3, 4, 5, 6, 7, 8}, oid: [layout.NumRoles]uint32{oidUUID, oidText, oidText, oidJSONB, oidJSONB, oidTSTZ, oidTS, oidTSTZ, oidTS}}
		r.oid[role] = 23 // int4
		err := checkTypes(r, names)
		want := fmt.Sprintf("%s: column %q has type oid 23; it must be one of %s", role.Field(), names[role], strings.Join(listed, ", "))
		if err == nil || err.Error() != want {
			t.Fatalf("err = %v\nwant %s", err, want)
		}
	}
	if got := acceptedNames(colType); got != "text, varchar, char(n)" {
		t.Fatalf("columns.type accepts %s", got)
	}
}
