package decoder

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pglogrepl"
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
