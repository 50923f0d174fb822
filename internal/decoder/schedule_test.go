package decoder

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/pgwiretest"
)

// TestDecodeDeliverAtAndExpiresAt: the mapped deliver_at and expires_at
// columns become the message's DeliverAt and ExpiresAt (NULL: zero), in
// an INSERT and in an adopt message of nine roles as in one of the seven
// roles written before them (mapped, they are NULL there); a bad value
// is an invalid row naming the column.
func TestDecodeDeliverAtAndExpiresAt(t *testing.T) {
	cols := layout.Default
	cols[layout.DeliverAt], cols[layout.ExpiresAt] = "deliver_at", "expires_at"
	d := New(Mapping{Schema: "public", Name: "outbox", Columns: cols})
	d.AcceptAdopted(AdoptPrefix("walpost_outbox"))
	rel := append(append([]col{}, outboxCols...), col{"deliver_at", oidTSTZ}, col{"expires_at", oidTS})
	mustDecode(t, d, 1, pgwiretest.Relation(1, "public", "outbox", rel...))
	mustDecode(t, d, 2, pgwiretest.Begin(9, time.Now(), 1))
	ev := mustDecode(t, d, 3, pgwiretest.Insert(1, s(id1), s("t"), nil, s(`{}`), nil, nil, s("2026-12-06 07:00:03+00"), s("2026-12-06 08:00:00")))
	if !ev.Msg.DeliverAt.Equal(time.Date(2026, 12, 6, 7, 0, 3, 0, time.UTC)) || !ev.Msg.ExpiresAt.Equal(time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)) {
		t.Fatalf("DeliverAt %s, ExpiresAt %s", ev.Msg.DeliverAt, ev.Msg.ExpiresAt)
	}
	ev = mustDecode(t, d, 4, pgwiretest.Insert(1, s(id1), s("t"), nil, s(`{}`), nil, nil, nil, nil))
	if !ev.Msg.DeliverAt.IsZero() || !ev.Msg.ExpiresAt.IsZero() {
		t.Fatalf("NULLs: DeliverAt %s, ExpiresAt %s", ev.Msg.DeliverAt, ev.Msg.ExpiresAt)
	}
	_, err := d.Decode(5, pgwiretest.Insert(1, s(id1), s("t"), nil, s(`{}`), nil, nil, s("soon"), nil))
	var de *Error
	if !errors.As(err, &de) || de.Table || !strings.Contains(err.Error(), "columns.deliver_at") {
		t.Fatalf("bad deliver_at: %v", err)
	}
	nine := `{"v": 1, "oids": [2950, 25, 25, 3802, 3802, 0, 0, 1184, 1114], "values": ["` + id1 + `", "t", null, "{}", null, null, null, "2026-12-06 07:00:03+00", null]}`
	ev = mustDecode(t, d, 6, pgwiretest.Message(6, true, "walpost.adopt.walpost_outbox", nine))
	if !ev.Msg.DeliverAt.Equal(time.Date(2026, 12, 6, 7, 0, 3, 0, time.UTC)) || !ev.Msg.ExpiresAt.IsZero() {
		t.Fatalf("adopted: DeliverAt %s, ExpiresAt %s", ev.Msg.DeliverAt, ev.Msg.ExpiresAt)
	}
	seven := `{"v": 1, "oids": [2950, 25, 25, 3802, 3802, 0, 0], "values": ["` + id1 + `", "t", null, "{}", null, null, null]}`
	ev = mustDecode(t, d, 7, pgwiretest.Message(7, true, "walpost.adopt.walpost_outbox", seven))
	if ev.Kind != Row || !ev.Msg.DeliverAt.IsZero() {
		t.Fatalf("adopt message of an older walpost: %+v", ev.Msg)
	}
}

// TestDecodeEnvelopeDeliverAtAndExpiresAt: the envelope's deliver_at and
// expires_at are RFC 3339 strings or null; anything else is refused.
func TestDecodeEnvelopeDeliverAtAndExpiresAt(t *testing.T) {
	m, err := DecodeEnvelope([]byte(`{"id":"` + id1 + `","type":"t","payload":{},"deliver_at":"2026-12-06T07:00:03.5Z","expires_at":null}`))
	if err != nil || !m.DeliverAt.Equal(time.Date(2026, 12, 6, 7, 0, 3, 5e8, time.UTC)) || !m.ExpiresAt.IsZero() {
		t.Fatalf("%v: DeliverAt %s, ExpiresAt %s", err, m.DeliverAt, m.ExpiresAt)
	}
	for _, bad := range []string{`"expires_at":"tomorrow"`, `"deliver_at":1765000000`} {
		if _, err := DecodeEnvelope([]byte(`{"id":"` + id1 + `","type":"t","payload":{},` + bad + `}`)); err == nil {
			t.Fatalf("%s: accepted", bad)
		}
	}
}
