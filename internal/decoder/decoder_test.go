package decoder

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/pgwiretest"
)

// The pgoutput messages are built by internal/pgwiretest.

type col = pgwiretest.Col

var (
	s          = pgwiretest.Str
	outboxCols = pgwiretest.OutboxCols
)

func newDecoder() *Decoder {
	return New(Mapping{Schema: "public", Name: "outbox", Columns: layout.Default})
}

func mustDecode(t *testing.T, d *Decoder, lsn pglogrepl.LSN, b []byte) Event {
	t.Helper()
	ev, err := d.Decode(lsn, b)
	if err != nil {
		t.Fatalf("Decode at %s: %v", lsn, err)
	}
	return ev
}

const id1 = "0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31"

func TestDecodeTransactionGivesRowsWithTheirLSNs(t *testing.T) {
	d := newDecoder()
	at := time.Date(2026, 12, 2, 10, 0, 0, 123000, time.UTC)
	if ev := mustDecode(t, d, 0x100, pgwiretest.Relation(16384, "public", "outbox", outboxCols...)); ev.Kind != Skip {
		t.Fatalf("relation: kind %v", ev.Kind)
	}
	ev := mustDecode(t, d, 0x100, pgwiretest.Begin(0x1F0, at, 700))
	if ev.Kind != Begin || ev.CommitLSN != 0x1F0 || ev.Xid != 700 || !d.InTransaction() {
		t.Fatalf("begin: %+v", ev)
	}
	ev = mustDecode(t, d, 0x120, pgwiretest.Insert(16384, s(id1), s("order.created"), s("order-7"),
		s(`{"total": 12}`), s(`{"traceparent": "00-abc-def-01", "n": 3}`), s("2026-12-02")))
	want := &message.Message{ID: id1, Type: "order.created", Key: "order-7", HasKey: true,
		Payload: []byte(`{"total": 12}`), PayloadJSON: true,
		Headers: map[string]string{"traceparent": "00-abc-def-01", "n": "3"},
		LSN:     0x120, CommitLSN: 0x1F0, CommitTime: at}
	if ev.Kind != Row || !reflect.DeepEqual(ev.Msg, want) {
		t.Fatalf("row:\n got %+v\nwant %+v", ev.Msg, want)
	}
	ev = mustDecode(t, d, 0x200, pgwiretest.Commit(0x1F0, 0x200, at))
	if ev.Kind != Commit || ev.LSN != 0x200 || ev.CommitLSN != 0x1F0 || d.InTransaction() {
		t.Fatalf("commit: %+v", ev)
	}
}

func TestDecodeNullKeyAndHeaders(t *testing.T) {
	d := newDecoder()
	mustDecode(t, d, 1, pgwiretest.Relation(1, "public", "outbox", outboxCols...))
	mustDecode(t, d, 2, pgwiretest.Begin(9, time.Now(), 1))
	ev := mustDecode(t, d, 3, pgwiretest.Insert(1, s(id1), s("t"), nil, s(`[1,2]`), nil, nil))
	if ev.Msg.HasKey || ev.Msg.Headers != nil || ev.Msg.OrderingKey() != id1 {
		t.Fatalf("got %+v", ev.Msg)
	}
}

func TestDecodeSkipsOtherTables(t *testing.T) {
	d := newDecoder()
	mustDecode(t, d, 1, pgwiretest.Relation(2, "public", "orders", col{"id", 23}))
	mustDecode(t, d, 2, pgwiretest.Begin(9, time.Now(), 1))
	if ev := mustDecode(t, d, 3, pgwiretest.Insert(2, s("1"))); ev.Kind != Skip {
		t.Fatalf("kind %v, want Skip", ev.Kind)
	}
}

func TestDecodeRelationSentAgainReplacesTheCachedOne(t *testing.T) {
	d := newDecoder()
	mustDecode(t, d, 1, pgwiretest.Relation(1, "public", "outbox", outboxCols...))
	// ALTER TABLE: a column added before payload moves the payload index.
	cols := []col{{"id", oidUUID}, {"type", oidText}, {"extra", oidText}, {"key", oidText}, {"payload", oidJSONB}, {"headers", oidJSONB}}
	mustDecode(t, d, 2, pgwiretest.Relation(1, "public", "outbox", cols...))
	mustDecode(t, d, 3, pgwiretest.Begin(9, time.Now(), 1))
	ev := mustDecode(t, d, 4, pgwiretest.Insert(1, s(id1), s("t"), s("x"), s("k"), s(`{"a":1}`), nil))
	if string(ev.Msg.Payload) != `{"a":1}` || ev.Msg.Key != "k" {
		t.Fatalf("got %+v", ev.Msg)
	}
}

func TestDecodeBadRowsNameIDAndLSN(t *testing.T) {
	textCols := []col{{"id", oidText}, {"type", oidText}, {"key", oidText}, {"payload", oidText}, {"headers", oidJSONB}}
	cases := []struct {
		name string
		cols []col
		vals []*string
		want string
	}{
		{"payload not JSON", textCols, []*string{s(id1), s("t"), nil, s("hello"), nil}, "payload is not valid JSON"},
		{"id not uuid", textCols, []*string{s("42"), s("t"), nil, s("{}"), nil}, "is not a UUID"},
		{"empty type", textCols, []*string{s(id1), s(""), nil, s("{}"), nil}, "type is NULL or empty"},
		{"null payload", textCols, []*string{s(id1), s("t"), nil, nil, nil}, "payload is NULL"},
		{"headers not object", textCols, []*string{s(id1), s("t"), nil, s("{}"), s("[1]")}, "headers: not a JSON object"},
		{"missing column", []col{{"id", oidUUID}, {"kind", oidText}, {"key", oidText}, {"payload", oidJSONB}, {"headers", oidJSONB}},
			[]*string{s(id1), s("t"), nil, s("{}"), nil}, `lacks mapped column(s) columns.type "type"`},
		{"payload of unusable type", []col{{"id", oidUUID}, {"type", oidText}, {"key", oidText}, {"payload", 23}, {"headers", oidJSONB}},
			[]*string{s(id1), s("t"), nil, s("1"), nil}, "columns.payload"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := newDecoder()
			mustDecode(t, d, 1, pgwiretest.Relation(1, "public", "outbox", c.cols...))
			mustDecode(t, d, 2, pgwiretest.Begin(0x99, time.Now(), 1))
			_, err := d.Decode(0x16B3748, pgwiretest.Insert(1, c.vals...))
			var de *Error
			if !errors.As(err, &de) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if de.LSN != 0x16B3748 || !strings.Contains(err.Error(), "0/16B3748") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %q, want LSN 0/16B3748 and %q", err, c.want)
			}
			if c.vals[0] != nil && *c.vals[0] == id1 && !strings.Contains(err.Error(), id1) {
				t.Fatalf("err = %q does not name the id", err)
			}
			if de.CommitLSN != 0x99 || de.Row[c.cols[0].Name] != *c.vals[0] {
				t.Fatalf("error carries commit %s and row %v, want commit 0/99 and the row's columns", de.CommitLSN, de.Row)
			}
			// The table's shape, not the row, is at fault when a mapped
			// column is missing or of an unusable type.
			if want := strings.Contains(c.name, "column") || strings.Contains(c.name, "unusable type"); de.Table != want {
				t.Fatalf("Table = %v, want %v", de.Table, want)
			}
		})
	}
}

func TestDecodeByteaPayload(t *testing.T) {
	d := New(Mapping{Schema: "public", Name: "outbox", Columns: layout.Columns{layout.ID: "id", layout.Type: "type", layout.Payload: "payload"}})
	mustDecode(t, d, 1, pgwiretest.Relation(1, "public", "outbox", col{"id", oidUUID}, col{"type", oidText}, col{"payload", oidBytea}))
	mustDecode(t, d, 2, pgwiretest.Begin(9, time.Now(), 1))
	ev := mustDecode(t, d, 3, pgwiretest.Insert(1, s(id1), s("t"), s(`\x00ff`)))
	if !reflect.DeepEqual(ev.Msg.Payload, []byte{0, 0xff}) || ev.Msg.PayloadJSON {
		t.Fatalf("got %+v", ev.Msg)
	}
	ev = mustDecode(t, d, 4, pgwiretest.Insert(1, s(id1), s("t"), s(`\x7b7d`)))
	if string(ev.Msg.Payload) != "{}" || !ev.Msg.PayloadJSON {
		t.Fatalf("got %+v", ev.Msg)
	}
}

func TestDecodeTableWithoutKeyOrHeaders(t *testing.T) {
	d := New(Mapping{Schema: "app", Name: "events", Columns: layout.Columns{layout.ID: "event_id", layout.Type: "aggregatetype", layout.Payload: "payload"}})
	mustDecode(t, d, 1, pgwiretest.Relation(5, "app", "events", col{"event_id", oidUUID}, col{"aggregatetype", oidText}, col{"payload", oidJSON}))
	mustDecode(t, d, 2, pgwiretest.Begin(9, time.Now(), 1))
	ev := mustDecode(t, d, 3, pgwiretest.Insert(5, s(id1), s("Order"), s(`{"x":true}`)))
	if ev.Msg.Type != "Order" || ev.Msg.HasKey || ev.Msg.Headers != nil {
		t.Fatalf("got %+v", ev.Msg)
	}
}

func TestDecodeHeartbeatOutsideTransactionIsProgress(t *testing.T) {
	d := newDecoder()
	if ev := mustDecode(t, d, 0x500, pgwiretest.Message(0x500, false, HeartbeatPrefix, "")); ev.Kind != Progress || ev.LSN != 0x500 {
		t.Fatalf("got %+v", ev)
	}
	mustDecode(t, d, 0x600, pgwiretest.Begin(0x700, time.Now(), 1))
	if ev := mustDecode(t, d, 0x650, pgwiretest.Message(0x650, true, "app", "")); ev.Kind != Skip {
		t.Fatalf("transactional message inside a transaction: %+v", ev)
	}
}

func TestDecodeMalformedIsProtocolError(t *testing.T) {
	d := newDecoder()
	mustDecode(t, d, 1, pgwiretest.Relation(1, "public", "outbox", outboxCols...))
	mustDecode(t, d, 2, pgwiretest.Begin(9, time.Now(), 1))
	full := pgwiretest.Insert(1, s(id1), s("t"), nil, s("{}"), nil, nil)
	for _, b := range [][]byte{full[:7], full[:len(full)-1], pgwiretest.Insert(77, s(id1))} {
		if _, err := d.Decode(3, b); !errors.Is(err, ErrProtocol) {
			t.Fatalf("Decode(%x) err = %v, want ErrProtocol", b, err)
		}
	}
}

func BenchmarkDecodeInsert(b *testing.B) {
	d := newDecoder()
	d.Decode(1, pgwiretest.Relation(1, "public", "outbox", outboxCols...))
	d.Decode(2, pgwiretest.Begin(9, time.Now(), 1))
	payload := `{"order_id":"o-123456","customer":"c-98765","lines":[{"sku":"A-1","qty":2,"price":"12.50"},{"sku":"B-7","qty":1,"price":"99.00"}],"currency":"EUR","note":"deliver between 9 and 5, ring twice, leave with the neighbour if absent"}`
	msg := pgwiretest.Insert(1, s(id1), s("order.created"), s("order-123456"), s(payload), nil, s("2026-12-02 10:00:00+00"))
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for i := 0; i < b.N; i++ {
		if _, err := d.Decode(3, msg); err != nil {
			b.Fatal(err)
		}
	}
}
