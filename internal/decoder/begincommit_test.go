package decoder

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/pgwiretest"
)

// TestBeginAndCommitParseAsPglogreplDoes: the hand-written parsers of the
// two fixed-size messages give pglogrepl.Parse's fields for any bytes,
// and ErrProtocol where it would fail or the message is cut short.
func TestBeginAndCommitParseAsPglogreplDoes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		for _, kind := range []byte{'B', 'C'} {
			full := map[byte]int{'B': 21, 'C': 26}[kind]
			n := full + rng.IntN(3)
			if i%4 == 0 {
				n = 1 + rng.IntN(full) // cut short
			}
			data := make([]byte, n)
			data[0] = kind
			for j := 1; j < n; j++ {
				data[j] = byte(rng.Uint32())
			}
			if kind == 'B' {
				got, err := parseBegin(7, data)
				want, werr := parse[*pglogrepl.BeginMessage](7, data)
				compare(t, data, err, werr, n >= full)
				if err == nil && (got.FinalLSN != want.FinalLSN || !got.CommitTime.Equal(want.CommitTime) || got.Xid != want.Xid) {
					t.Fatalf("%x: got %+v, pglogrepl %+v", data, got, *want)
				}
				continue
			}
			got, err := parseCommit(7, data)
			want, werr := parse[*pglogrepl.CommitMessage](7, data)
			compare(t, data, err, werr, n >= full)
			if err == nil && (got.Flags != want.Flags || got.CommitLSN != want.CommitLSN || got.TransactionEndLSN != want.TransactionEndLSN ||
				!got.CommitTime.Equal(want.CommitTime)) {
				t.Fatalf("%x: got %+v, pglogrepl %+v", data, got, *want)
			}
		}
	}
}

func compare(t *testing.T, data []byte, err, werr error, whole bool) {
	t.Helper()
	if (err == nil) != (werr == nil) || (err == nil) != whole {
		t.Fatalf("%x: error %v, pglogrepl's %v", data, err, werr)
	}
	if err != nil && (!errors.Is(err, ErrProtocol) || err.Error() != werr.Error()) {
		t.Fatalf("%x: error %q, want %q", data, err, werr)
	}
}

func TestBeginAndCommitAllocateNothing(t *testing.T) {
	d := New(Mapping{Schema: "public", Name: "outbox"})
	begin := []byte{'B', 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 42}
	commit := []byte{'C', 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 8, 0, 0, 0, 0, 0, 0, 0, 9}
	if a := testing.AllocsPerRun(100, func() {
		if _, err := d.Decode(1, begin); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Decode(2, commit); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("Begin and Commit: %v allocations, want 0", a)
	}
}

// TestRowsOfOneTypeShareItsString: a row's type is one string per type
// (no allocation per row for it), up to maxTypes types; the values are
// the rows' own either way.
func TestRowsOfOneTypeShareItsString(t *testing.T) {
	d := newDecoder()
	mustDecode(t, d, 1, pgwiretest.Relation(1, "public", "outbox", outboxCols...))
	mustDecode(t, d, 2, pgwiretest.Begin(9, time.Now(), 1))
	row := func(lsn pglogrepl.LSN, typ string) string {
		ev := mustDecode(t, d, lsn, pgwiretest.Insert(1, s(id1), s(typ), nil, s("{}"), nil, nil))
		if ev.Msg == nil || ev.Msg.Type != typ {
			t.Fatalf("got %+v, want a row of type %q", ev, typ)
		}
		return ev.Msg.Type
	}
	a, b := row(3, "order.created"), row(4, "order.created")
	if unsafe.StringData(a) != unsafe.StringData(b) {
		t.Error("two rows of one type hold two copies of it")
	}
	for i := range maxTypes + 10 {
		row(pglogrepl.LSN(10+i), fmt.Sprintf("type.%d", i))
	}
	if len(d.types) != maxTypes {
		t.Errorf("%d types kept, want at most %d", len(d.types), maxTypes)
	}
	if got := row(5000, "type.9999"); got != "type.9999" {
		t.Errorf("a type past the bound: %q", got)
	}
}
