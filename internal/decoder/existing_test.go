package decoder

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/pgwiretest"
)

// efCoreCols is the EF Core outbox of examples/efcore/outbox.sql.
var efCoreCols = []col{{"Id", oidUUID}, {"Type", oidText}, {"Payload", oidText}, {"CreatedOnUtc", oidTSTZ}, {"ProcessedOnUtc", oidTSTZ}, {"Error", oidText}}

func efCoreDecoder() *Decoder {
	return New(Mapping{Schema: "public", Name: "OutboxMessages",
		Columns: layout.Columns{"Id", "Type", "", "Payload", "", "CreatedOnUtc", "ProcessedOnUtc"}})
}

// TestDecodeTimeColumnIsTheMessageTime: a mapped timestamp column is the
// message's time in every form PostgreSQL writes with DateStyle ISO; an
// unmapped one leaves the commit time; a timestamp it cannot publish is
// an invalid row naming the column.
func TestDecodeTimeColumnIsTheMessageTime(t *testing.T) {
	commit := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2026-12-01 08:30:15.123456+00":    time.Date(2026, 12, 1, 8, 30, 15, 123456000, time.UTC),
		"2026-12-01 08:30:15+01":           time.Date(2026, 12, 1, 7, 30, 15, 0, time.UTC),
		"2026-12-01 08:30:15.5+05:30":      time.Date(2026, 12, 1, 3, 0, 15, 500000000, time.UTC),
		"2026-12-01 08:30:15-03:00:00":     time.Date(2026, 12, 1, 11, 30, 15, 0, time.UTC),
		"2026-12-01 08:30:15.000001":       time.Date(2026, 12, 1, 8, 30, 15, 1000, time.UTC),
		"1999-01-08 04:05:06.789012345+00": time.Date(1999, 1, 8, 4, 5, 6, 789012345, time.UTC),
	} {
		d := efCoreDecoder()
		mustDecode(t, d, 1, pgwiretest.Relation(7, "public", "OutboxMessages", efCoreCols...))
		mustDecode(t, d, 2, pgwiretest.Begin(0x90, commit, 1))
		ev := mustDecode(t, d, 3, pgwiretest.Insert(7, s(id1), s("OrderPlaced"), s(`{"n":1}`), s(in), nil, nil))
		if ev.Kind != Row || !ev.Msg.Time.Equal(want) || !ev.Msg.EventTime().Equal(want) || !ev.Msg.CommitTime.Equal(commit) || !ev.Msg.PayloadJSON {
			t.Errorf("%s: time %v (event time %v), want %v", in, ev.Msg.Time, ev.Msg.EventTime(), want)
		}
	}
	d := efCoreDecoder()
	mustDecode(t, d, 1, pgwiretest.Relation(7, "public", "OutboxMessages", efCoreCols...))
	mustDecode(t, d, 2, pgwiretest.Begin(0x90, commit, 1))
	_, err := d.Decode(3, pgwiretest.Insert(7, s(id1), s("OrderPlaced"), s(`{}`), s("infinity"), nil, nil))
	var de *Error
	if !errors.As(err, &de) || de.Table || !strings.Contains(err.Error(), `columns.time: column "CreatedOnUtc": "infinity" is not a timestamp`) {
		t.Fatalf("err = %v", err)
	}
	// Unmapped: the commit time.
	d = newDecoder()
	mustDecode(t, d, 1, pgwiretest.Relation(16384, "public", "outbox", outboxCols...))
	mustDecode(t, d, 2, pgwiretest.Begin(0x90, commit, 1))
	ev := mustDecode(t, d, 3, pgwiretest.Insert(16384, s(id1), s("t"), nil, s(`{}`), nil, s("2001-01-01 00:00:00+00")))
	if !ev.Msg.Time.IsZero() || !ev.Msg.EventTime().Equal(commit) {
		t.Fatalf("unmapped time column: %v / %v", ev.Msg.Time, ev.Msg.EventTime())
	}
}

// TestDecodeAdoptedRowIsTheRowItStandsFor: an adopt message of the slot's
// prefix decodes, inside its transaction, to the Row an INSERT of the
// same values gives; other prefixes are skipped; a malformed one is an
// invalid row (on_invalid applies), not a protocol error.
func TestDecodeAdoptedRowIsTheRowItStandsFor(t *testing.T) {
	commit := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	d := efCoreDecoder()
	d.AcceptAdopted(AdoptPrefix("walpost_outbox"))
	mustDecode(t, d, 1, pgwiretest.Begin(0x90, commit, 1))
	adopt := `{"v": 1, "oids": [2950, 25, 0, 25, 0, 1184, 0], "values": ["` + id1 + `", "OrderPlaced", null, "{\"n\": 1}", null, "2026-12-01 08:30:15+00", null]}`
	ev := mustDecode(t, d, 0x50, pgwiretest.Message(0x50, true, "walpost.adopt.walpost_outbox", adopt))
	m := ev.Msg
	if ev.Kind != Row || m.ID != id1 || m.Type != "OrderPlaced" || m.HasKey || string(m.Payload) != `{"n": 1}` ||
		!m.Time.Equal(time.Date(2026, 12, 1, 8, 30, 15, 0, time.UTC)) || m.LSN != 0x50 || m.CommitLSN != 0x90 || !m.CommitTime.Equal(commit) {
		t.Fatalf("adopted row: %+v", m)
	}
	if ev := mustDecode(t, d, 0x60, pgwiretest.Message(0x60, true, "walpost.adopt.other_slot", adopt)); ev.Kind != Skip {
		t.Fatalf("another slot's adopt message: kind %v", ev.Kind)
	}
	_, err := d.Decode(0x70, pgwiretest.Message(0x70, true, "walpost.adopt.walpost_outbox", `{"v": 2}`))
	var de *Error
	if !errors.As(err, &de) || errors.Is(err, ErrProtocol) || de.LSN != 0x70 || de.Row["adopt_message"] != `{"v": 2}` {
		t.Fatalf("malformed adopt message: %v", err)
	}
	notUTF8 := strings.Replace(adopt, "OrderPlaced", "Order\xffPlaced", 1)
	if _, err := d.Decode(0x78, pgwiretest.Message(0x78, true, "walpost.adopt.walpost_outbox", notUTF8)); !errors.As(err, &de) || de.LSN != 0x78 {
		t.Fatalf("adopted row that is not UTF-8: %v (it must not be published with U+FFFD)", err)
	}
	bad := strings.Replace(adopt, `"{\"n\": 1}"`, `"not json"`, 1)
	if _, err := d.Decode(0x80, pgwiretest.Message(0x80, true, "walpost.adopt.walpost_outbox", bad)); !errors.As(err, &de) || !strings.Contains(err.Error(), "payload is not valid JSON") {
		t.Fatalf("adopted row with a bad payload: %v", err)
	}
}
