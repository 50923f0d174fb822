package decoder

import (
	"errors"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgwiretest"
)

// The outbox is known by its OID as well as by its name (docs/design.md,
// "The publication or the table changing under the relay").
func TestDecodeOutboxIsKnownByOIDAndByName(t *testing.T) {
	d := newDecoder()
	d.SetOutbox(10, nil)
	for _, c := range []struct {
		oid     uint32
		ns, rel string
		want    RelationNote
	}{
		{10, "public", "outbox", RelationNote{OID: 10, Name: "public.outbox"}},
		{10, "public", "outbox_renamed", RelationNote{OID: 10, Name: "public.outbox_renamed", Renamed: true}},
		{11, "public", "outbox", RelationNote{OID: 11, Name: "public.outbox", Recreated: true}},
		{12, "public", "orders", RelationNote{OID: 12, Name: "public.orders", Foreign: true}},
	} {
		ev := mustDecode(t, d, 1, pgwiretest.Relation(c.oid, c.ns, c.rel, outboxCols...))
		if ev.Kind != Skip || ev.Rel == nil || *ev.Rel != c.want {
			t.Fatalf("%s (oid %d): got %+v %+v, want %+v", c.rel, c.oid, ev, ev.Rel, c.want)
		}
		mustDecode(t, d, 2, pgwiretest.Begin(9, time.Now(), 1))
		ev = mustDecode(t, d, 3, pgwiretest.Insert(c.oid, s(id1), s("t"), nil, s(`{}`), nil, nil))
		if want := map[bool]Kind{false: Row, true: Skip}[c.want.Foreign]; ev.Kind != want {
			t.Fatalf("%s (oid %d): insert kind %v, want %v", c.rel, c.oid, ev.Kind, want)
		}
		mustDecode(t, d, 4, pgwiretest.Commit(9, 10, time.Now()))
	}
}

// A column renamed (and renamed back) is the same attribute: a Relation
// whose names changed but whose column count and types are those of the
// last Relation of the same OID that mapped by name maps by position.
func TestDecodeRenamedColumnMapsByPosition(t *testing.T) {
	renamed := append([]col(nil), outboxCols...)
	renamed[1] = col{"kind", oidText}
	for _, seed := range []bool{false, true} {
		d := newDecoder()
		if seed {
			// The relay's start: the catalog's columns, before any Relation.
			var cols []Column
			for _, c := range outboxCols {
				cols = append(cols, Column{c.Name, c.OID})
			}
			d.SetOutbox(1, cols)
		} else {
			mustDecode(t, d, 1, pgwiretest.Relation(1, "public", "outbox", outboxCols...))
			d.Reset() // a reconnect keeps what mapped before
		}
		ev := mustDecode(t, d, 2, pgwiretest.Relation(1, "public", "outbox", renamed...))
		if ev.Rel == nil || !ev.Rel.Positional || ev.Rel.Columns != `"kind" as "type"` {
			t.Fatalf("seed %v: note %+v", seed, ev.Rel)
		}
		mustDecode(t, d, 3, pgwiretest.Begin(9, time.Now(), 1))
		ev = mustDecode(t, d, 4, pgwiretest.Insert(1, s(id1), s("order.created"), nil, s(`{}`), nil, nil))
		if ev.Kind != Row || ev.Msg.Type != "order.created" {
			t.Fatalf("seed %v: got %+v", seed, ev)
		}
	}

	// Without a Relation that mapped, or with a type changed, the row is
	// a table error (docs/design.md: the advice is cdc resync).
	retyped := append([]col(nil), renamed...)
	retyped[1] = col{"kind", oidVarchar}
	for name, d := range map[string]*Decoder{"no earlier relation": newDecoder(), "type changed": newDecoder()} {
		if name == "type changed" {
			mustDecode(t, d, 1, pgwiretest.Relation(1, "public", "outbox", outboxCols...))
			mustDecode(t, d, 2, pgwiretest.Relation(1, "public", "outbox", retyped...))
		} else {
			mustDecode(t, d, 2, pgwiretest.Relation(1, "public", "outbox", renamed...))
		}
		mustDecode(t, d, 3, pgwiretest.Begin(9, time.Now(), 1))
		_, err := d.Decode(4, pgwiretest.Insert(1, s(id1), s("order.created"), nil, s(`{}`), nil, nil))
		var de *Error
		if !errors.As(err, &de) || !de.Table {
			t.Fatalf("%s: got %v, want a table error", name, err)
		}
	}
}
