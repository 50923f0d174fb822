package decoder

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/pgwiretest"
)

// TestDecodeRowsSharingAnLSNGetTheirOrdinal: rows of one multi-insert WAL
// record (COPY) share an LSN; Seq numbers them 0, 1, 2 in stream order, a
// bad row among them takes its number too, the next LSN starts at 0
// again, and a transaction read again (a reconnect) numbers its rows as
// the first time.
func TestDecodeRowsSharingAnLSNGetTheirOrdinal(t *testing.T) {
	d := newDecoder()
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	row := func(typ string) []byte {
		return pgwiretest.Insert(16384, s(id1), s(typ), nil, s(`{}`), nil, s("2026-12-03"))
	}
	type got struct {
		lsn pglogrepl.LSN
		seq uint32
		bad bool
	}
	read := func() []got {
		mustDecode(t, d, 0x100, pgwiretest.Relation(16384, "public", "outbox", outboxCols...))
		mustDecode(t, d, 0x100, pgwiretest.Begin(0x500, at, 7))
		var out []got
		for _, r := range []struct {
			lsn pglogrepl.LSN
			typ string
		}{{0x200, "a"}, {0x200, "b"}, {0x200, ""}, {0x200, "d"}, {0x300, "e"}, {0x400, "f"}, {0x400, "g"}} {
			ev, err := d.Decode(r.lsn, row(r.typ))
			var de *Error
			switch {
			case errors.As(err, &de):
				out = append(out, got{de.LSN, de.Seq, true})
			case err != nil:
				t.Fatal(err)
			default:
				out = append(out, got{ev.Msg.LSN, ev.Msg.Seq, false})
			}
		}
		mustDecode(t, d, 0x500, pgwiretest.Commit(0x500, 0x510, at))
		return out
	}
	want := []got{{0x200, 0, false}, {0x200, 1, false}, {0x200, 2, true}, {0x200, 3, false}, {0x300, 0, false}, {0x400, 0, false}, {0x400, 1, false}}
	first := read()
	for i := range want {
		if first[i] != want[i] {
			t.Fatalf("row %d: got %+v, want %+v (all: %+v)", i, first[i], want[i], first)
		}
	}
	// The stream breaks mid-transaction and the server sends it again.
	mustDecode(t, d, 0x100, pgwiretest.Begin(0x500, at, 7))
	mustDecode(t, d, 0x200, row("a"))
	d.Reset()
	again := read()
	for i := range want {
		if again[i] != want[i] {
			t.Fatalf("read again, row %d: got %+v, want %+v", i, again[i], want[i])
		}
	}
}
