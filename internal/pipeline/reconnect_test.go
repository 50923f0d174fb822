package pipeline

import (
	"testing"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/store"
)

// A reconnect inside a run (docs/design.md, "A reconnect inside a run"):
// the stream breaks inside a transaction, replication.Stream connects
// again and sends a Reset, and the server sends the open transaction
// again from its Begin. What the pipeline handled of it before goes
// nowhere again.

// TestAReconnectInsideATransactionHandsNoSinkWhatItHad: the replay hands
// each sink only the rows it was not handed before, whatever they were
// routed to (a row routed to no sink included); the marker gets every
// id of the transaction once, at its commit; and the slot is not
// confirmed past the transaction until the deliveries handed before the
// reset are acknowledged, even when every delivery of the replay is.
func TestAReconnectInsideATransactionHandsNoSinkWhatItHad(t *testing.T) {
	m := &fakeMarker{}
	h := start(t, Options{Marker: m, Routes: []config.Route{{Include: []string{"order.*"}}, {Exclude: []string{"none"}}}})
	m.h = h
	open := txn(7, 0x100, 0x1F0, row{1, "order.a"}, row{2, "invoice"}, row{3, "none"}, row{4, "order.b"}, row{5, "invoice"}, row{6, "invoice"})
	h.send(batch(relation(0x100), open[:5])) // Begin and rows 1–4
	s0, s1 := h.recv(0), h.recv(1)
	want(t, "sink0 before the reset", ids(s0), []string{"1", "4"})
	want(t, "sink1 before the reset", ids(s1), []string{"1", "2", "4"})

	h.send(batch(reset()))
	h.send(batch(relation(0x100), open))
	again := h.recv(1)
	want(t, "sink1 from the replay", ids(again), []string{"5", "6"})
	h.nothing(0)
	if n := h.inFlight(); n != 7 {
		t.Fatalf("window holds %d deliveries, want 7 (5 before the reset, 2 after)", n)
	}
	if h.metrics.decoded.count() != 6 {
		t.Errorf("decoded counted %d rows, want 6", h.metrics.decoded.count())
	}
	h.ack(1, s1)
	h.ack(1, again)
	if c := h.confirmed(); c != 0 {
		t.Fatalf("confirmed %s with sink0's deliveries of before the reset unacknowledged", c)
	}
	if len(m.adds) != 1 {
		t.Fatalf("marker handed %d transactions, want 1", len(m.adds))
	}
	want(t, "marker's ids", m.adds[0].ids, []string{"1", "2", "3", "4", "5", "6"})
	h.ack(0, s0)
	if c := h.confirmed(); c != 0x1F8 {
		t.Fatalf("confirmed %s, want the commit's end 0/1F8", c)
	}
	if p := h.progress.of("sink1"); p != store.PositionOf(again[1].Msg) {
		t.Fatalf("sink1's progress at %+v, want row 6's position", p)
	}
}

// TestAReconnectInsideATransactionParksAndHoldsNothingTwice: under
// relay.on_invalid: hold_key, a bad row parked as its key's head and a
// row parked behind it before the reset are not parked again by the
// replay, nor is the row behind the head delivered when the key is found
// released by then (it was parked: the release resends it); the rows
// after the prefix go by the key's state as usual.
func TestAReconnectInsideATransactionParksAndHoldsNothingTwice(t *testing.T) {
	f := &fakeHolds{released: map[string]bool{}}
	h := start(t, Options{Invalid: HoldKey, HoldStore: f})
	open := keyedTxn(7, 0x100, 0x1F0, []string{"a", "b", "b", "a", "b", "a"},
		row{1, "t"}, row{2, ""}, row{3, "t"}, row{4, "t"}, row{5, "t"}, row{6, "t"})
	h.send(batch(relation(0x100), open[:5])) // Begin and rows 1–4
	before := h.recv(0)
	want(t, "delivered before the reset", ids(before), []string{"1", "4"})
	want(t, "heads", f.heads, []string{"b/2"})
	want(t, "held", f.held, []string{"3"})

	h.send(batch(reset()))
	f.mu.Lock()
	f.released["b"] = true
	f.mu.Unlock()
	h.send(batch(relation(0x100), open))
	want(t, "delivered from the replay", ids(h.recv(0)), []string{"5", "6"})
	want(t, "heads", f.heads, []string{"b/2"})
	want(t, "held", f.held, []string{"3"})
}

// TestRepeatedReconnectsInsideATransactionHandOnEachRowOnce: the stream
// breaks three times inside one transaction, once before the replay
// reached the rows handled first; each row is handed on once, a bad row
// (relay.on_invalid: dead_letter) parked once, and a fill asked for
// meanwhile waits for the replay's commit, so that it leaves out the
// rows of the transaction the replay carries instead of relaying them
// ahead of it.
func TestRepeatedReconnectsInsideATransactionHandOnEachRowOnce(t *testing.T) {
	m := &fakeMarker{}
	h := start(t, Options{Marker: m, Invalid: Park})
	m.h = h
	open := txn(7, 0x100, 0x1F0, row{1, "t"}, row{2, ""}, row{3, "t"}, row{4, "t"}, row{5, "t"})
	h.send(batch(relation(0x100), open[:3])) // Begin, rows 1 and 2
	first := h.recv(0)
	want(t, "handed first", ids(first), []string{"1"})

	h.send(batch(reset()))
	filled := make(chan FillDone, 1)
	go func() {
		d, _ := h.p.Fill(h.ctx, FillRows([]*message.Message{{ID: uuid(4), Type: "t"}, {ID: uuid(99), Type: "t"}}))
		filled <- d
	}()
	for range 100 { // Run takes the fill between two batches
		h.sync()
	}
	h.nothing(0)
	h.send(batch(relation(0x100), open[:2])) // Begin, row 1
	h.send(batch(reset()))
	h.nothing(0)
	h.send(batch(relation(0x100), open[:4])) // Begin, rows 1–3
	second := h.recv(0)
	want(t, "handed second", ids(second), []string{"3"})
	h.send(batch(reset()))
	h.send(batch(relation(0x100), open))
	third := h.recv(0)
	want(t, "handed third", ids(third), []string{"4", "5"})
	fill := h.recv(0)
	want(t, "fill after the replay's commit", ids(fill), []string{"99"})
	if d := <-filled; d.Relayed != 1 || d.Carried != 1 {
		t.Fatalf("fill answered %+v, want 1 relayed, 1 carried", d)
	}
	want(t, "parked", h.dead.parkedAt(), []string{store.FormatAt(rowLSN(0x100, 1), 0)})
	if len(m.adds) != 1 {
		t.Fatalf("marker handed %d transactions, want 1", len(m.adds))
	}
	want(t, "marker's ids", m.adds[0].ids, []string{"1", "3", "4", "5"})
	for _, ds := range [][]publish.Delivery{first, second, third} {
		if c := h.confirmed(); c != 0 {
			t.Fatalf("confirmed %s before every delivery of the transaction was acknowledged", c)
		}
		h.ack(0, ds)
	}
	if c := h.confirmed(); c != 0x1F8 {
		t.Fatalf("confirmed %s, want the commit's end 0/1F8", c)
	}
	h.ack(0, fill)
}
