package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/pgwiretest"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/store"
)

// TestRowsGoOnlyToTheSinksTheirTypeRoutesTo: each sink gets, in one slice
// per input batch and in stream order, the rows its route selects; every
// delivery holds room in the window and is tracked in its transaction,
// which is confirmed only once every sink acknowledged its deliveries.
func TestRowsGoOnlyToTheSinksTheirTypeRoutesTo(t *testing.T) {
	h := start(t, Options{Routes: []config.Route{{Include: []string{"order.*"}}, {Include: []string{"invoice.*"}}, {}}})
	h.send(batch(relation(0x100), txn(7, 0x100, 0x1F0,
		row{1, "order.created"}, row{2, "invoice.paid"}, row{3, "order.shipped"}, row{4, "other"})))
	s0, s1, s2 := h.recv(0), h.recv(1), h.recv(2)
	want(t, "sink0", ids(s0), []string{"1", "3"})
	want(t, "sink1", ids(s1), []string{"2"})
	want(t, "sink2", ids(s2), []string{"1", "2", "3", "4"})
	h.nothing(0)
	if n := h.inFlight(); n != 7 {
		t.Fatalf("window holds %d deliveries, want 7", n)
	}
	if h.metrics.decoded.count() != 4 {
		t.Errorf("decoded counted %d rows, want 4", h.metrics.decoded.count())
	}
	for _, d := range append(append(s0, s1...), s2...) {
		if d.Txn != s0[0].Txn || d.Txn == nil {
			t.Fatalf("delivery %s is tracked in another transaction's entry", d.Msg.ID)
		}
	}
	if m := s2[2].Msg; m.LSN != rowLSN(0x100, 2) || m.CommitLSN != 0x1F0 || m.Type != "order.shipped" {
		t.Fatalf("row 3 at %s, commit %s, type %s", m.LSN, m.CommitLSN, m.Type)
	}
	h.ack(0, s0)
	h.ack(2, s2)
	if c := h.confirmed(); c != 0 {
		t.Fatalf("confirmed %s with sink1's delivery not acknowledged", c)
	}
	h.ack(1, s1)
	if c := h.confirmed(); c != 0x1F8 {
		t.Fatalf("confirmed %s once every sink acknowledged, want the commit's end 0/1F8", c)
	}
	if n := h.inFlight(); n != 0 {
		t.Fatalf("window holds %d deliveries after every ack", n)
	}
	if p := h.progress.of("sink0"); p != store.PositionOf(s0[1].Msg) {
		t.Fatalf("sink0's progress at %+v, want its last message's position", p)
	}
	if got := h.sinkM[2].published.total(); got != 4 {
		t.Errorf("sink2 published counted %v, want 4", got)
	}
	if got := h.sinkM[2].latency.count(); got != 4 {
		t.Errorf("sink2 latency observed %d times, want 4", got)
	}
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	h.closed(0)
	h.closed(1)
	h.closed(2)
}

// TestASinkDoesNotGetAgainWhatItAcknowledgedBeforeARestart: a sink whose
// progress (loaded at start) covers a message does not get it again; the
// others do. A transaction no sink needs is confirmed at its commit.
func TestASinkDoesNotGetAgainWhatItAcknowledgedBeforeARestart(t *testing.T) {
	// sink0 acknowledged up to the second row of the transaction at 0x200
	// before the restart; sink1 nothing, and it takes only order.*.
	acked := store.Position{CommitLSN: 0x2F0, LSN: rowLSN(0x200, 1)}
	h := start(t, Options{Routes: []config.Route{{}, {Include: []string{"order.*"}}},
		Acked: []store.Position{acked}})
	// Wholly covered for sink0, not routed to sink1: nothing to deliver.
	h.send(batch(relation(0x100), txn(6, 0x100, 0x1F0, row{1, "invoice.paid"})))
	h.nothing(0)
	h.nothing(1)
	if c := h.confirmed(); c != 0x1F8 {
		t.Fatalf("confirmed %s, want 0/1F8: a transaction no sink needs is confirmed at its commit", c)
	}
	h.send(batch(txn(7, 0x200, 0x2F0, row{2, "order.a"}, row{3, "order.b"}, row{4, "order.c"}),
		txn(8, 0x300, 0x3F0, row{5, "order.d"})))
	s0, s1 := h.recv(0), h.recv(1)
	want(t, "sink0", ids(s0), []string{"4", "5"})
	want(t, "sink1", ids(s1), []string{"2", "3", "4", "5"})
	if n := h.inFlight(); n != 6 {
		t.Fatalf("window holds %d deliveries, want 6", n)
	}
	h.ack(1, s1)
	if c := h.confirmed(); c != 0x1F8 {
		t.Fatalf("confirmed %s before sink0 acknowledged", c)
	}
	h.ack(0, s0)
	if c := h.confirmed(); c != 0x3F8 {
		t.Fatalf("confirmed %s, want 0/3F8", c)
	}
}

// TestAFullWindowHandsOnWhatItHoldsThenWaits: when the window has no room
// for the next delivery, the pipeline first hands the sinks what it
// gathered (their acknowledgements are what frees the window), then stops
// taking events until a sink acknowledges.
func TestAFullWindowHandsOnWhatItHoldsThenWaits(t *testing.T) {
	h := start(t, Options{Window: NewWindow(2, 1<<30)})
	h.give(batch(relation(0x100), txn(7, 0x100, 0x1F0, row{1, "t"}, row{2, "t"}, row{3, "t"})))
	first := h.recv(0)
	want(t, "before the window filled", ids(first), []string{"1", "2"})
	synced := make(chan struct{})
	go func() {
		h.events <- nil // taken once the pipeline is past the full window
		close(synced)
	}()
	select {
	case <-synced:
		t.Fatal("the pipeline took more events with the window full")
	case <-time.After(100 * time.Millisecond):
	}
	if n := h.inFlight(); n != 2 {
		t.Fatalf("window holds %d deliveries, want 2", n)
	}
	h.ack(0, first[:1]) // room for one
	select {
	case <-synced:
	case <-h.ctx.Done():
		t.Fatal("the pipeline did not go on once the window had room")
	}
	want(t, "after an ack", ids(h.recv(0)), []string{"3"})
	if c := h.confirmed(); c != 0 {
		t.Fatalf("confirmed %s with two deliveries unacknowledged", c)
	}
}

// TestABadRowGoesByOnInvalid: relay.on_invalid: dead_letter parks a row
// the decoder cannot map and goes on; stop stops at it (everything before
// it handed on, nothing after it tracked) unless cdc skip parked it; a
// table that does not fit the mapping stops the pipeline whatever
// on_invalid says.
func TestABadRowGoesByOnInvalid(t *testing.T) {
	bad := batch(relation(0x100), txn(7, 0x100, 0x1F0, row{1, "t"}, row{2, ""}, row{3, "t"}))
	badAt := store.FormatAt(rowLSN(0x100, 1), 0)

	t.Run("dead_letter parks it and goes on", func(t *testing.T) {
		h := start(t, Options{Invalid: Park})
		h.send(bad)
		ds := h.recv(0)
		want(t, "delivered", ids(ds), []string{"1", "3"})
		want(t, "parked", h.dead.parkedAt(), []string{badAt})
		if h.metrics.deadLettered.count() != 1 {
			t.Fatalf("dead-lettered counted %d, want 1", h.metrics.deadLettered.count())
		}
		h.ack(0, ds)
		if c := h.confirmed(); c != 0x1F8 {
			t.Fatalf("confirmed %s, want the commit's end", c)
		}
	})
	for name, o := range map[string]Options{"stop stops at it": {}} {
		t.Run(name, func(t *testing.T) {
			h := start(t, o)
			h.give(bad)
			err := h.wait()
			var stop *StopAtRow
			if !errors.As(err, &stop) || store.FormatAt(stop.Err.LSN, stop.Err.Seq) != badAt {
				t.Fatalf("Run returned %v, want a *StopAtRow at %s", err, badAt)
			}
			want(t, "handed on before the bad row", ids(h.recv(0)), []string{"1"})
			h.closed(0)
			want(t, "looked up", h.dead.lookups, []string{badAt})
			if len(h.dead.parks) != 0 {
				t.Fatalf("parked %v under %s", h.dead.parkedAt(), o.Invalid)
			}
		})
	}
	t.Run("stop goes past a row cdc skip parked", func(t *testing.T) {
		h := start(t, Options{})
		h.dead.parked[badAt] = true
		h.send(bad)
		ds := h.recv(0)
		want(t, "delivered", ids(ds), []string{"1", "3"})
		h.ack(0, ds)
		if c := h.confirmed(); c != 0x1F8 {
			t.Fatalf("confirmed %s, want the commit's end", c)
		}
		if len(h.dead.parks) != 0 || h.metrics.deadLettered.count() != 0 {
			t.Fatalf("a row cdc skip parked was parked again")
		}
	})
	t.Run("a failed lookup stops", func(t *testing.T) {
		h := start(t, Options{})
		h.dead.lookErr = errBroken
		h.give(bad)
		err := h.wait()
		var de *decoder.Error
		if !errors.As(err, &de) || !strings.Contains(err.Error(), "broken") {
			t.Fatalf("Run returned %v, want the row's error and the lookup's", err)
		}
	})
	t.Run("a failed park stops", func(t *testing.T) {
		h := start(t, Options{Invalid: Park})
		h.dead.parkErr = errBroken
		h.give(bad)
		if err := h.wait(); !errors.Is(err, errBroken) {
			t.Fatalf("Run returned %v, want the dead-letter store's error", err)
		}
		want(t, "handed on before the bad row", ids(h.recv(0)), []string{"1"})
	})
	t.Run("a table that does not fit stops", func(t *testing.T) {
		h := start(t, Options{Invalid: Park})
		noType := []col{{"id", oidUUID}, {"kind", oidText}, {"key", oidText}, {"payload", oidJSONB}, {"headers", oidJSONB}, {"created_at", 1184}}
		h.give(batch(data(0x100, pgwiretest.Relation(outboxOID, "public", "outbox", noType...)), txn(7, 0x100, 0x1F0, row{1, "t"})))
		var stop *StopAtRow
		if err := h.wait(); !errors.As(err, &stop) || !stop.Err.Table {
			t.Fatalf("Run returned %v, want a *StopAtRow for the table", err)
		}
		if len(h.dead.parks) != 0 {
			t.Fatal("a row of a table that does not fit was parked")
		}
	})
}

// TestForgedMessagesAreNeverPublished: an envelope without a valid
// signature is parked and an adopt message no cdc init wrote ignored,
// whatever relay.on_invalid says; neither stops the pipeline.
func TestForgedMessagesAreNeverPublished(t *testing.T) {
	envelope := func(n int) string {
		return `{"v":1,"id":"` + uuid(n) + `","type":"t","payload":{}}`
	}
	t.Run("envelope", func(t *testing.T) {
		dec := decoder.New(decoder.Mapping{Schema: "public", Name: "outbox", Columns: layout.Default})
		dec.AcceptMessages("walpost")
		dec.RequireSignature([][]byte{[]byte("key")})
		h := start(t, Options{Decoder: dec, TableLess: true})
		h.send(batch(data(0x100, pgwiretest.Begin(0x1F0, commitTime, 7)), data(0x110, pgwiretest.Message(0x110, true, "walpost", envelope(1))),
			data(0x1F8, pgwiretest.Commit(0x1F0, 0x1F8, commitTime))))
		h.nothing(0)
		want(t, "parked", h.dead.parkedAt(), []string{store.FormatAt(0x110, 0)})
		if h.metrics.forgedEnvelopes.count() != 1 || h.metrics.deadLettered.count() != 0 {
			t.Fatalf("forged envelopes counted %d, dead-lettered %d; want 1, 0", h.metrics.forgedEnvelopes.count(), h.metrics.deadLettered.count())
		}
		if c := h.confirmed(); c != 0x1F8 {
			t.Fatalf("confirmed %s, want the commit's end", c)
		}
	})
	t.Run("adopt", func(t *testing.T) {
		dec := decoder.New(decoder.Mapping{Schema: "public", Name: "outbox", Columns: layout.Default})
		dec.AcceptAdopted(decoder.AdoptPrefix("slot"))
		dec.AdoptFrom([]uint32{}) // no transaction of cdc init --adopt
		h := start(t, Options{Decoder: dec, Invalid: Park})
		h.send(batch(relation(0x100), data(0x100, pgwiretest.Begin(0x1F0, commitTime, 7)),
			data(0x110, pgwiretest.Message(0x110, true, decoder.AdoptPrefix("slot"), `{"v":1}`)), insert(0x120, row{2, "t"}),
			data(0x1F8, pgwiretest.Commit(0x1F0, 0x1F8, commitTime))))
		want(t, "delivered", ids(h.recv(0)), []string{"2"})
		if h.metrics.forgedAdopts.count() != 1 || len(h.dead.parks) != 0 {
			t.Fatalf("forged adopts counted %d, parked %d; want 1, 0", h.metrics.forgedAdopts.count(), len(h.dead.parks))
		}
	})
}

// TestTheMarkerGetsATransactionsIdsBeforeTheTrackerItsCommit: with
// columns.sent_at mapped, the marker is handed each transaction's ids at
// its commit, before the tracker could confirm it; when the marker is
// full, what is gathered for the sinks is handed on first.
func TestTheMarkerGetsATransactionsIdsBeforeTheTrackerItsCommit(t *testing.T) {
	t.Run("order", func(t *testing.T) {
		m := &fakeMarker{}
		// No sink takes "t": nothing holds the commit once the tracker has it.
		h := start(t, Options{Marker: m, Routes: []config.Route{{Exclude: []string{"t"}}}})
		m.h = h
		h.send(batch(relation(0x100), txn(7, 0x100, 0x1F0, row{1, "t"}, row{2, "t"}), txn(8, 0x200, 0x2F0, row{3, "t"})))
		if len(m.adds) != 2 {
			t.Fatalf("marker handed %d transactions, want 2", len(m.adds))
		}
		a, b := m.adds[0], m.adds[1]
		want(t, "first transaction's ids", a.ids, []string{"1", "2"})
		want(t, "second transaction's ids", b.ids, []string{"3"})
		if a.end != 0x1F8 || a.xid != 7 || b.end != 0x2F8 || b.xid != 8 {
			t.Fatalf("marker handed (%s, %d), (%s, %d); want (0/1F8, 7), (0/2F8, 8)", a.end, a.xid, b.end, b.xid)
		}
		if a.confirmed >= a.end || b.confirmed >= b.end {
			t.Fatalf("the tracker confirmed %s, %s when the marker was handed the transactions: it had their commits first", a.confirmed, b.confirmed)
		}
		if c := h.confirmed(); c != 0x2F8 {
			t.Fatalf("confirmed %s, want 0/2F8", c)
		}
	})
	for _, full := range []bool{false, true} {
		name := map[bool]string{false: "not full", true: "full hands on first"}[full]
		t.Run(name, func(t *testing.T) {
			m := &fakeMarker{full: full}
			h := start(t, Options{Marker: m})
			m.h = h
			h.send(batch(relation(0x100), txn(7, 0x100, 0x1F0, row{1, "t"})))
			queued := map[bool]int{false: 0, true: 1}[full]
			if len(m.adds) != 1 || m.adds[0].queued != queued {
				t.Fatalf("marker handed %+v, want one transaction with %d slice(s) handed to the sink before", m.adds, queued)
			}
			want(t, "delivered", ids(h.recv(0)), []string{"1"})
		})
	}
	t.Run("error", func(t *testing.T) {
		m := &fakeMarker{err: errBroken}
		h := start(t, Options{Marker: m, Routes: []config.Route{{Exclude: []string{"t"}}}})
		m.h = h
		h.give(batch(relation(0x100), txn(7, 0x100, 0x1F0, row{1, "t"})))
		if err := h.wait(); !errors.Is(err, errBroken) {
			t.Fatalf("Run returned %v, want the marker's error", err)
		}
		if c := h.confirmed(); c != 0 {
			t.Fatalf("confirmed %s: a transaction the marker did not take was committed", c)
		}
	})
}

// TestAResetMidTransactionAbandonsIt: a new connection (Reset) inside a
// transaction abandons it: what of it was handed on must still be
// acknowledged before anything after it is confirmed, the decoder starts
// afresh (a keepalive is outside any transaction again), the server's
// replay of it hands on only what was not handed before, and the marker
// gets the transaction's ids once. More in reconnect_test.go.
func TestAResetMidTransactionAbandonsIt(t *testing.T) {
	m := &fakeMarker{}
	h := start(t, Options{Marker: m})
	m.h = h
	open := txn(7, 0x100, 0x1F0, row{1, "t"}, row{2, "t"})
	h.send(batch(relation(0x100), open[:2])) // Begin and row 1, no commit
	abandoned := h.recv(0)
	want(t, "before the reset", ids(abandoned), []string{"1"})

	h.send(batch(reset(), keepalive(0x180)))
	if c := h.confirmed(); c != 0 {
		t.Fatalf("confirmed %s with a delivery of the abandoned transaction unacknowledged", c)
	}
	h.ack(0, abandoned)
	if c := h.confirmed(); c != 0x180 {
		t.Fatalf("confirmed %s after the abandoned delivery's ack, want the keepalive's 0/180", c)
	}
	h.send(batch(relation(0x100), open))
	again := h.recv(0)
	want(t, "handed on from the replay", ids(again), []string{"2"})
	h.ack(0, again)
	if c := h.confirmed(); c != 0x1F8 {
		t.Fatalf("confirmed %s, want the commit's end", c)
	}
	if len(m.adds) != 1 {
		t.Fatalf("marker handed %d transactions, want 1", len(m.adds))
	}
	want(t, "marker's ids", m.adds[0].ids, []string{"1", "2"})
}

// TestAKeepaliveInsideATransactionConfirmsNothing: a keepalive's WAL end
// is progress only between transactions.
func TestAKeepaliveInsideATransactionConfirmsNothing(t *testing.T) {
	h := start(t, Options{Routes: []config.Route{{Exclude: []string{"t"}}}})
	tx := txn(7, 0x100, 0x1F0, row{1, "t"})
	h.send(batch(relation(0x100), tx[:2], keepalive(0x500)))
	if c, p := h.confirmed(), h.p.Handled(); c != 0 || p != 0 {
		t.Fatalf("confirmed %s, handled %s inside a transaction; want 0, 0", c, p)
	}
	h.send(batch(tx[2:], keepalive(0x600)))
	if c := h.confirmed(); c != 0x600 {
		t.Fatalf("confirmed %s, want the keepalive's 0/600", c)
	}
	if got := h.p.Handled(); got != 0x600 {
		t.Fatalf("handled %s, want 0/600", got)
	}
}

// TestAFillRelaysOnlyWhatTheStreamDidNotCarry: rows read from the table
// for a stretch the stream may not have carried are relayed, as one
// transaction placed just before the last position handled, unless their
// id was carried.
func TestAFillRelaysOnlyWhatTheStreamDidNotCarry(t *testing.T) {
	h := start(t, Options{})
	h.send(batch(relation(0x100), txn(7, 0x100, 0x1F0, row{1, "t"}, row{2, "t"})))
	streamed := h.recv(0)
	h.ack(0, streamed)
	msgs := []*message.Message{{ID: uuid(2), Type: "t"}, {ID: uuid(9), Type: "t"}}
	type answer struct {
		d   FillDone
		err error
	}
	got := make(chan answer, 1)
	go func() {
		d, err := h.p.Fill(h.ctx, FillRows(msgs))
		got <- answer{d, err}
	}()
	filled := h.recv(0)
	a := <-got
	if a.err != nil || a.d.Relayed != 1 || a.d.Carried != 1 || a.d.Txn == nil {
		t.Fatalf("Fill answered %+v, %v; want 1 relayed, 1 carried", a.d, a.err)
	}
	want(t, "filled", ids(filled), []string{"9"})
	if m := filled[0].Msg; m.LSN != 0x1F7 || m.CommitLSN != 0x1F7 {
		t.Fatalf("fill's row at %s, commit %s; want just before the last commit's end 0/1F8", m.LSN, m.CommitLSN)
	}
	if a.d.Settled(h.tracker) {
		t.Fatal("the fill is settled before the sink acknowledged it")
	}
	h.ack(0, filled)
	if !a.d.Settled(h.tracker) || h.confirmed() != 0x1F8 {
		t.Fatalf("settled %v, confirmed %s after the ack; want true, 0/1F8", a.d.Settled(h.tracker), h.confirmed())
	}
}

// TestARefusedMessageIsParkedThenSettled: relay.on_refused: dead_letter
// parks what a sink refuses for good and settles it like an ack, without
// counting it published; when it cannot be parked nothing is settled.
func TestARefusedMessageIsParkedThenSettled(t *testing.T) {
	for _, parks := range []bool{true, false} {
		t.Run(map[bool]string{true: "parked", false: "park fails"}[parks], func(t *testing.T) {
			h := start(t, Options{})
			h.send(batch(relation(0x100), txn(7, 0x100, 0x1F0, row{1, "t"}, row{2, "t"}, row{3, "t"})))
			ds := h.recv(0)
			dead := &fakeDead{}
			if !parks {
				dead.refusErr = errBroken
			}
			m := testSinkMetrics{&tally{}, &tally{}, &tally{}}
			st := NewSettler(SettlerOptions{Sink: "s", Tracker: h.tracker, Window: h.window, Progress: h.progress, Refusals: dead,
				Metrics: SinkMetrics{Published: m.published, Latency: m.latency, Refused: m.refused}})
			// The sink takes 1 and 3 and refuses 2 for good (a runner whose
			// sink refuses every batch holding 2).
			in := make(chan []publish.Delivery, 1)
			in <- ds
			close(in)
			r := publish.NewRunner(refuser{id: ds[1].Msg.ID}, in, publish.RunnerOptions{Ack: st.Ack, Refused: st.Refused, RefusedAttempts: 1})
			err := r.Run(context.Background())
			if !parks {
				if !errors.Is(err, errBroken) || !strings.Contains(err.Error(), "refused 2") {
					t.Fatalf("Run returned %v, want the store's error and the refusal", err)
				}
				if n := h.inFlight(); n != 2 || h.confirmed() != 0 || m.refused.count() != 0 {
					t.Fatalf("window holds %d, confirmed %s, refused %d; want 2 (the refused and the next), 0, 0", n, h.confirmed(), m.refused.count())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want(t, "parked", dead.refused, []string{"s/2"})
			if h.confirmed() != 0x1F8 || h.inFlight() != 0 {
				t.Fatalf("confirmed %s, window %d; want 0/1F8, 0", h.confirmed(), h.inFlight())
			}
			if m.published.total() != 2 || m.refused.count() != 1 || m.latency.count() != 2 {
				t.Fatalf("published %v, refused %d, latency observed %d; want 2, 1, 2", m.published.total(), m.refused.count(), m.latency.count())
			}
			if p := h.progress.of("s"); p != store.PositionOf(ds[2].Msg) {
				t.Fatalf("progress at %+v, want the last message's", p)
			}
		})
	}
}

// refuser refuses, for good, every call holding the message id; it takes
// any other call whole.
type refuser struct{ id string }

func (r refuser) Name() string { return "refuser" }
func (r refuser) Close() error { return nil }
func (r refuser) Publish(ctx context.Context, msgs []*message.Message) error {
	for _, m := range msgs {
		if m.ID == r.id {
			return publish.Rejected(errors.New("refused " + idNum(m.ID)))
		}
	}
	return nil
}
