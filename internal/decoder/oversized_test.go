package decoder

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/envsig"
	"github.com/walpost/walpost/internal/pgwiretest"
)

// cutInChunks runs msg through a Cut fed chunk bytes at a time, as the
// stream reads it.
func cutInChunks(msg []byte, chunk int) []byte {
	c := NewCut(0, int64(len(msg)))
	for p := 0; p < len(msg); p += chunk {
		end := min(p+chunk, len(msg))
		if n := c.Feed(msg[p:end]); n != end-p {
			panic("Feed took less than it was given")
		}
	}
	return c.Message()
}

// TestCutKeepsTheHeadAndSmallColumnsWhateverTheChunks: the stand-in of an
// oversized Insert keeps the small columns (id, type, key) before and
// after the big one, and leaves the big one out with its length; it is
// the same whatever the size of the pieces the message came in, and its
// size is bounded.
func TestCutKeepsTheHeadAndSmallColumnsWhateverTheChunks(t *testing.T) {
	big := strings.Repeat("x", 3<<20)
	msg := pgwiretest.Insert(1, s(id1), s("big.type"), s("k1"), s(`{"pad":"`+big+`"}`), nil, s("2026-12-05 12:00:00+00"))
	want := cutInChunks(msg, len(msg))
	if len(want) > maxCutKept+1024 {
		t.Fatalf("stand-in of %d bytes", len(want))
	}
	for _, chunk := range []int{1, 7, 4096, 1 << 20} {
		if got := cutInChunks(msg, chunk); string(got) != string(want) {
			t.Fatalf("chunks of %d: stand-in differs", chunk)
		}
	}

	d := newDecoder()
	mustDecode(t, d, 0x10, pgwiretest.Relation(1, "public", "outbox", outboxCols...))
	mustDecode(t, d, 0x20, pgwiretest.Begin(0x90, time.Now(), 7))
	_, err := d.Decode(0x30, want)
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("Decode of the stand-in: %v, want an *Error", err)
	}
	if e.ID != id1 || !e.KeyKnown || e.Key != "k1" || e.LSN != 0x30 || e.CommitLSN != 0x90 || e.Forged || e.Table {
		t.Fatalf("error %+v: want id, key, positions of the row", e)
	}
	if _, ok := e.Row["payload"]; ok || e.Row["type"] != "big.type" || e.Row["size"] == "" {
		t.Fatalf("row %v: want the small columns and not the payload", e.Row)
	}
	for _, w := range []string{OversizedText, "payload", "cdc replay --id"} {
		if !strings.Contains(e.Error(), w) {
			t.Fatalf("error %q does not say %q", e, w)
		}
	}
	// A second oversized row at the same LSN is the next ordinal.
	if _, err := d.Decode(0x30, want); !errors.As(err, &e) || e.Seq != 1 {
		t.Fatalf("second row at the LSN: %v (seq %d), want seq 1", err, e.Seq)
	}
}

// TestCutOfABigKeyLeavesTheKeyUnknown: a key too large to keep is not
// taken for a NULL key (which would be the id).
func TestCutOfABigKeyLeavesTheKeyUnknown(t *testing.T) {
	msg := pgwiretest.Insert(1, s(id1), s("t"), s(strings.Repeat("k", 2*maxCutValue)), s(`{"pad":"`+strings.Repeat("x", 2<<20)+`"}`), nil, nil)
	d := newDecoder()
	mustDecode(t, d, 0x10, pgwiretest.Relation(1, "public", "outbox", outboxCols...))
	mustDecode(t, d, 0x20, pgwiretest.Begin(0x90, time.Now(), 7))
	_, err := d.Decode(0x30, CutHead(msg, int64(len(msg))))
	var e *Error
	if !errors.As(err, &e) || e.KeyKnown || e.ID != id1 {
		t.Fatalf("Decode: %v (%+v), want an *Error with the id and no key", err, e)
	}
}

// TestCutOfOtherTablesAndPrefixesIsWhatTheMessageWouldBe: an oversized
// row of another table is skipped; a logical message of another prefix
// is Progress outside a transaction and nothing inside one; of the
// table-less outbox's prefix it is an invalid row, parked as forged
// under message_keys (its signature cannot be checked).
func TestCutOfOtherTablesAndPrefixesIsWhatTheMessageWouldBe(t *testing.T) {
	content := strings.Repeat("y", 2<<20)
	cut := func(b []byte) []byte { return CutHead(b, int64(len(b))) }

	d := newDecoder()
	mustDecode(t, d, 0x10, pgwiretest.Relation(2, "public", "other", outboxCols...))
	if ev := mustDecode(t, d, 0x11, cut(pgwiretest.Message(0x11, false, "attacker", content))); ev.Kind != Progress || ev.LSN != 0x11 {
		t.Fatalf("non-transactional foreign message: %+v, want Progress at its LSN", ev)
	}
	mustDecode(t, d, 0x20, pgwiretest.Begin(0x90, time.Now(), 7))
	if ev := mustDecode(t, d, 0x21, cut(pgwiretest.Insert(2, s(id1), s("t"), nil, s(`"`+content+`"`), nil, nil))); ev.Kind != Skip {
		t.Fatalf("other table's row: %+v, want Skip", ev)
	}
	if ev := mustDecode(t, d, 0x22, cut(pgwiretest.Message(0x22, true, strings.Repeat("p", 5000), content))); ev.Kind != Skip {
		t.Fatalf("a long foreign prefix: %+v, want Skip", ev)
	}

	for _, keys := range [][][]byte{nil, {[]byte("0123456789abcdef0123")}} {
		d := messagesDecoder()
		if keys != nil {
			d.RequireSignature(keys)
		}
		mustDecode(t, d, 0x20, pgwiretest.Begin(0x90, time.Now(), 7))
		env := `{"id":"` + id1 + `","type":"t","payload":"` + content + `"}`
		if keys != nil {
			env = string(envsig.Sign(keys[0], "walpost", []byte(env)))
		}
		_, err := d.Decode(0x23, cut(pgwiretest.Message(0x23, true, "walpost", env)))
		var e *Error
		if !errors.As(err, &e) || e.Forged != (keys != nil) || e.LSN != 0x23 || e.CommitLSN != 0x90 || !strings.Contains(e.Error(), OversizedText) {
			t.Fatalf("keys %v: %v (%+v), want an invalid row, forged only under keys", keys != nil, err, e)
		}
	}
}
