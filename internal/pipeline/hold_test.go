package pipeline

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/pgwiretest"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/store"
)

// fakeHolds records what the pipeline parks by key; a key in released is
// found released at its next ParkBehind.
type fakeHolds struct {
	mu       sync.Mutex
	heads    []string // key/id
	held     []string // id
	released map[string]bool
}

func (f *fakeHolds) ParkHead(ctx context.Context, e *decoder.Error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.heads = append(f.heads, e.Key+"/"+idNum(e.ID))
	return nil
}

func (f *fakeHolds) ParkRefusedHead(ctx context.Context, sink string, m *message.Message, cause error) error {
	return errors.New("not the pipeline's")
}

func (f *fakeHolds) ParkBehind(ctx context.Context, sink string, m *message.Message) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.released[m.OrderingKey()] {
		return false, nil
	}
	f.held = append(f.held, idNum(m.ID))
	return true, nil
}

// keyedTxn is a transaction like txn's whose rows have keys: rows[i] is
// {n, typ} and keys[i] its key.
func keyedTxn(xid uint32, base, commit pglogrepl.LSN, keys []string, rows ...row) []replication.Event {
	evs := []replication.Event{data(base, pgwiretest.Begin(commit, commitTime, xid))}
	for i, r := range rows {
		evs = append(evs, data(rowLSN(base, i), pgwiretest.Insert(outboxOID, s(uuid(r.n)), s(r.typ), s(keys[i]), s(`{"n": 1}`), nil, s("2026-12-02 10:00:00+00"))))
	}
	return append(evs, data(commit+8, pgwiretest.Commit(commit, commit+8, commitTime)))
}

// TestHoldKeyHoldsTheKeyOfABadRow: under relay.on_invalid: hold_key a bad
// row (2, key b) is parked as its key's head; b's later messages are held
// behind it while a's are delivered; once b is found released its next
// message is delivered, and the ones after it without asking again. A
// key held from before the run (c) is held only from its head on.
func TestHoldKeyHoldsTheKeyOfABadRow(t *testing.T) {
	f := &fakeHolds{released: map[string]bool{}}
	cHead := store.Position{CommitLSN: 0x2F0, LSN: rowLSN(0x200, 1)}
	h := start(t, Options{Invalid: HoldKey, HoldStore: f, Holds: []store.Hold{{Key: "c", Head: cHead}, {Sink: "other", Key: "a"}}})
	h.send(batch(relation(0x100),
		keyedTxn(7, 0x100, 0x1F0, []string{"a", "b", "a", "b", "c"}, row{1, "t"}, row{2, ""}, row{3, "t"}, row{4, "t"}, row{5, "t"}),
		keyedTxn(8, 0x200, 0x2F0, []string{"b", "c", "a"}, row{6, "t"}, row{7, "t"}, row{8, "t"})))
	ds := h.recv(0)
	want(t, "delivered", ids(ds), []string{"1", "3", "5", "8"})
	want(t, "heads", f.heads, []string{"b/2"})
	want(t, "held", f.held, []string{"4", "6", "7"})
	h.ack(0, ds)
	if c := h.confirmed(); c != 0x2F8 {
		t.Fatalf("confirmed %s, want the second commit's end: held rows are settled", c)
	}

	f.mu.Lock()
	f.released["b"] = true
	f.mu.Unlock()
	h.send(keyedTxn(9, 0x300, 0x3F0, []string{"b", "b"}, row{9, "t"}, row{10, "t"}))
	want(t, "delivered after the release", ids(h.recv(0)), []string{"9", "10"})
	want(t, "held", f.held, []string{"4", "6", "7"})
}

// TestHoldKeyStopsAtABadRowWhoseKeyCannotBeRead: which messages to hold
// is unknown, so Run stops at the row (NoKey) having parked nothing.
func TestHoldKeyStopsAtABadRowWhoseKeyCannotBeRead(t *testing.T) {
	f := &fakeHolds{released: map[string]bool{}}
	h := start(t, Options{Invalid: HoldKey, HoldStore: f})
	h.give(batch(relation(0x100), keyedTxn(7, 0x100, 0x1F0, []string{"a", "\xff"}, row{1, "t"}, row{2, "t"})))
	var stop *StopAtRow
	if err := h.wait(); !errors.As(err, &stop) || !stop.NoKey {
		t.Fatalf("Run returned %v, want a *StopAtRow with NoKey", err)
	}
	want(t, "handed on before the row", ids(h.recv(0)), []string{"1"})
	if len(f.heads) != 0 {
		t.Fatalf("parked %v", f.heads)
	}
}

// TestHoldKeyGoesPastABadRowWithoutAKeyThatCdcSkipParked: the way past
// the stop above that the relay's error names, cdc skip, works under
// hold_key too: the row is looked up, found parked and gone past,
// holding nothing.
func TestHoldKeyGoesPastABadRowWithoutAKeyThatCdcSkipParked(t *testing.T) {
	f := &fakeHolds{released: map[string]bool{}}
	h := start(t, Options{Invalid: HoldKey, HoldStore: f})
	h.dead.parked[store.FormatAt(rowLSN(0x100, 1), 0)] = true
	h.send(batch(relation(0x100), keyedTxn(7, 0x100, 0x1F0, []string{"a", "\xff", "a"}, row{1, "t"}, row{2, "t"}, row{3, "t"})))
	ds := h.recv(0)
	want(t, "delivered", ids(ds), []string{"1", "3"})
	want(t, "looked up", h.dead.lookups, []string{store.FormatAt(rowLSN(0x100, 1), 0)})
	if len(f.heads) != 0 || len(f.held) != 0 {
		t.Fatalf("parked %v, held %v", f.heads, f.held)
	}
	h.ack(0, ds)
	if c := h.confirmed(); c != 0x1F8 {
		t.Fatalf("confirmed %s, want the commit's end", c)
	}
}
