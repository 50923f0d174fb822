package replication

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Tests of Stream against a scripted fake server (fakeserver_test.go): no
// Postgres, no network.

// expectData checks that ev is the XLogData at lsn whose pgoutput message
// is of kind.
func expectData(t *testing.T, ev Event, lsn pglogrepl.LSN, kind byte) {
	t.Helper()
	if ev.Kind != Data || ev.LSN != lsn || len(ev.Data) == 0 || ev.Data[0] != kind {
		t.Fatalf("got event %v at %v (%q…), want %c at %v", ev.Kind, ev.LSN, ev.Data[:min(len(ev.Data), 1)], kind, lsn)
	}
}

// expectTx checks that the next events are the transaction txMsgs(start,
// end, rows, …) made.
func expectTx(t *testing.T, h *harness, start, end pglogrepl.LSN, rows int) {
	t.Helper()
	expectData(t, h.next(t), start, 'B')
	for i := range rows {
		expectData(t, h.next(t), start+pglogrepl.LSN(i), 'I')
	}
	expectData(t, h.next(t), end, 'C')
}

func slotActive() error {
	return startError("fake_slot", &pgconn.PgError{Code: "55006", Message: `replication slot "fake_slot" is active for PID 42`})
}

func TestReconnectResumesAtTheEndOfTheLastCommitReceivedInFullAndResendsACutTransactionAfterAReset(t *testing.T) {
	h := runStream(t, StreamOptions{})
	c1 := h.srv.accept()
	if at := c1.startedAt(t); at != 0 {
		t.Fatalf("first connection started at %v, want 0 (the slot's confirmed position)", at)
	}
	c1.send(txMsgs(0x100, 0x1A0, 2, 0, 0)...)
	cut := txMsgs(0x200, 0x2A0, 3, 0, 0)
	c1.send(cut[:3]...) // Begin and two of three inserts
	c1.drop()
	expectTx(t, h, 0x100, 0x1A0, 2)
	expectData(t, h.next(t), 0x200, 'B')
	expectData(t, h.next(t), 0x200, 'I')
	expectData(t, h.next(t), 0x201, 'I')

	c2 := h.srv.accept()
	if at := c2.startedAt(t); at != 0x1A0 {
		t.Fatalf("reconnected at %v, want 0/1A0, the end of the last commit received in full", at)
	}
	c2.send(cut...)
	if ev := h.next(t); ev.Kind != Reset {
		t.Fatalf("first event after the reconnect is %v, want Reset", ev.Kind)
	}
	expectTx(t, h, 0x200, 0x2A0, 3)
}

func TestKeepaliveOutsideATransactionMovesTheResumePointAndOneInsideDoesNot(t *testing.T) {
	h := runStream(t, StreamOptions{})
	c1 := h.srv.accept()
	c1.send(txMsgs(0x100, 0x1A0, 1, 0, 0)...)
	c1.send(keepaliveMsg(0x300, false)) // outside: the resume point
	c1.send(xLogData(0x400, 0, beginMsg(0x4A0, 0)))
	c1.send(keepaliveMsg(0x500, false)) // inside the transaction at 0x400
	c1.drop()
	expectTx(t, h, 0x100, 0x1A0, 1)
	for _, want := range []Event{{Kind: Keepalive, LSN: 0x300}, {Kind: Data, LSN: 0x400}, {Kind: Keepalive, LSN: 0x500}} {
		if ev := h.next(t); ev.Kind != want.Kind || ev.LSN != want.LSN {
			t.Fatalf("got %v at %v, want %v at %v", ev.Kind, ev.LSN, want.Kind, want.LSN)
		}
	}
	if got := h.stream.ServerWAL(); got != 0x500 {
		t.Errorf("ServerWAL = %v, want 0/500 from the last keepalive", got)
	}
	c2 := h.srv.accept()
	if at := c2.startedAt(t); at != 0x300 {
		t.Fatalf("reconnected at %v, want 0/300: the keepalive outside a transaction, not the one inside", at)
	}
}

func TestStatusUpdatesReportTheConfirmedPositionAndAMoveWhileBusyWithoutWaitingForTheInterval(t *testing.T) {
	h := newHarness(t, StreamOptions{StatusInterval: time.Hour})
	h.cp.set(0x123)
	// Downstream has messages in flight (the confirmer is not idle): the
	// stream looks at the position every 10 ms.
	h.cp.busy = true
	h.run(t)
	c := h.srv.accept()
	waitFor(t, "the first status update", func() bool { return len(c.statusesSoFar()) >= 1 })
	if st := c.statusesSoFar()[0]; st.lsn != 0x123 || st.received != 0 {
		t.Fatalf("first status update %+v, want the confirmed 0/123 before reading anything", st)
	}
	h.cp.set(0x456)
	waitFor(t, "a status update with the moved position 0/456", func() bool {
		s := c.statusesSoFar()
		return s[len(s)-1].lsn == 0x456
	})
	for _, st := range c.statusesSoFar() {
		if st.lsn != 0x123 && st.lsn != 0x456 {
			t.Errorf("status update reported %v, which the confirmer never had", st.lsn)
		}
	}
}

func TestKeepaliveAskingForAReplyGetsAStatusUpdateAtOnce(t *testing.T) {
	h := runStream(t, StreamOptions{StatusInterval: time.Hour})
	c := h.srv.accept()
	c.send(keepaliveMsg(0x10, false), keepaliveMsg(0x20, true))
	waitFor(t, "a reply to the keepalive", func() bool { return len(c.statusesSoFar()) >= 2 })
	s := c.statusesSoFar()
	if s[1].received != 2 {
		t.Fatalf("second status update sent after %d messages, want right after the keepalive asking for it (2): %+v", s[1].received, s)
	}
}

func TestFinalStatusGoesOutAfterDrainedWithTheLastConfirmedPosition(t *testing.T) {
	h := runStream(t, StreamOptions{StatusInterval: time.Hour})
	c := h.srv.accept()
	c.send(txMsgs(0x100, 0x1A0, 1, 0, 0)...)
	expectTx(t, h, 0x100, 0x1A0, 1)
	h.stop()
	for range h.out { // Run closes its output first, so the pipeline drains
	}
	h.cp.set(0x1A0) // the sinks acknowledged while draining
	for _, st := range c.statusesSoFar() {
		if st.lsn == 0x1A0 {
			t.Fatal("the final position was reported before Drained")
		}
	}
	h.closeDrained()
	if err := h.result(t); err != nil {
		t.Fatalf("Run after its context ended: %v, want nil", err)
	}
	s := c.statusesSoFar()
	if last := s[len(s)-1]; last.lsn != 0x1A0 {
		t.Fatalf("last status update %v, want the final confirmed position 0/1A0", last.lsn)
	}
	select {
	case <-c.closed:
	default:
		t.Error("the connection was not closed")
	}
}

func TestSlotHeldOnReconnectAfterStreamingIsErrSlotLost(t *testing.T) {
	h := runStream(t, StreamOptions{})
	c := h.srv.accept()
	c.startedAt(t)
	c.drop()
	h.srv.refuse(slotActive())
	if err := h.result(t); !errors.Is(err, ErrSlotLost) {
		t.Fatalf("Run returned %v, want ErrSlotLost", err)
	}
}

func TestSlotHeldOnTheFirstConnectIsWaitedForNotLost(t *testing.T) {
	h := runStream(t, StreamOptions{})
	h.srv.refuse(slotActive())
	h.srv.refuse(slotActive())
	c := h.srv.accept()
	c.startedAt(t)
	waitFor(t, "the stream connected", h.stream.Connected)
	waits := h.srv.waitsSoFar()
	if len(waits) != 2 {
		t.Fatalf("waits %v, want one per refusal", waits)
	}
	for _, w := range waits {
		if w < SlotPoll*3/4 || w > SlotPoll*5/4 {
			t.Errorf("waited %v for a held slot, want SlotPoll (%v) jittered", w, SlotPoll)
		}
	}
	c.send(txMsgs(0x100, 0x1A0, 1, 0, 0)...)
	expectTx(t, h, 0x100, 0x1A0, 1) // no Reset: nothing streamed before
}

func TestAcquireWaitsWhileTheSlotIsHeldAndRunStreamsOnTheConnectionItGot(t *testing.T) {
	h := newHarness(t, StreamOptions{})
	h.srv.refuse(slotActive())
	c := h.srv.accept()
	if err := h.stream.Acquire(t.Context()); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if n := h.srv.dials(); n != 2 {
		t.Fatalf("%d dials, want 2", n)
	}
	h.run(t)
	c.send(txMsgs(0x100, 0x1A0, 1, 0, 0)...)
	expectTx(t, h, 0x100, 0x1A0, 1)
	if n := h.srv.dials(); n != 2 {
		t.Fatalf("Run dialed again (%d dials); it must stream on Acquire's connection", n)
	}
}

func TestMissingSlotIsFatalAtOnce(t *testing.T) {
	h := newHarness(t, StreamOptions{})
	h.srv.refuse(startError("fake_slot", &pgconn.PgError{Code: "42704", Message: `replication slot "fake_slot" does not exist`}))
	if err := h.stream.Acquire(t.Context()); !errors.Is(err, ErrSlotMissing) || !isFatal(err) {
		t.Fatalf("Acquire returned %v, want a fatal ErrSlotMissing", err)
	}
	if w := h.srv.waitsSoFar(); len(w) != 0 {
		t.Errorf("Acquire waited %v before giving up", w)
	}
}

func TestBackoffReturnsToItsStartAfterAConnectionThatStreamed(t *testing.T) {
	h := runStream(t, StreamOptions{})
	refused := errors.New("fake: connection refused")
	for range 5 {
		h.srv.refuse(refused)
	}
	c := h.srv.accept()
	c.startedAt(t)
	c.drop()
	waitFor(t, "six waits", func() bool { return len(h.srv.waitsSoFar()) == 6 })
	waits := h.srv.waitsSoFar()
	if w := waits[4]; w < 8*BackoffStart {
		t.Errorf("fifth wait in a row of refusals %v, want the backoff grown to at least %v", w, 8*BackoffStart)
	}
	if w := waits[5]; w > BackoffStart {
		t.Errorf("wait after a connection that streamed %v, want at most BackoffStart (%v): %v", w, BackoffStart, waits)
	}
}

func TestServerErrorInTheStreamIsFatalAndCopyDoneReconnects(t *testing.T) {
	h := runStream(t, StreamOptions{})
	c1 := h.srv.accept()
	c1.send(&pgproto3.CopyDone{})
	c2 := h.srv.accept()
	c2.startedAt(t)
	c2.send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "58P01", Message: "requested WAL segment has already been removed"})
	err := h.result(t)
	var pgErr *pgconn.PgError
	if !isFatal(err) || !errors.As(err, &pgErr) || pgErr.Code != "58P01" {
		t.Fatalf("Run returned %v, want the server's error, fatal", err)
	}
}

func TestABatchCarriesAtMostMaxBatchEvents(t *testing.T) {
	h := runStream(t, StreamOptions{})
	c := h.srv.accept()
	const rows = 2*maxBatch + 100
	c.send(txMsgs(0x1000, 0x9000, rows, 0, 0)...) // all queued: read without waiting
	total := 0
	for total < rows+2 {
		b := h.batch(t)
		if len(b) > maxBatch {
			t.Fatalf("a batch of %d events, over maxBatch (%d)", len(b), maxBatch)
		}
		if total == 0 && len(b) != maxBatch {
			t.Errorf("first batch of %d events with more queued, want maxBatch (%d)", len(b), maxBatch)
		}
		total += len(b)
	}
}

func TestABatchStopsTakingMessagesOnceItHoldsMaxBatchBytes(t *testing.T) {
	h := runStream(t, StreamOptions{})
	c := h.srv.accept()
	msgs := []pgproto3.BackendMessage{xLogData(0x100, 0, beginMsg(0x1000, 0))}
	for i := range 100 {
		msgs = append(msgs, xLogData(0x100+pglogrepl.LSN(i), 0, insertMsg(10_000)))
	}
	msgs = append(msgs, xLogData(0x1000, 0, commitMsg(0x1000)))
	c.send(msgs...)
	for total := 0; total < len(msgs); {
		b := h.batch(t)
		bytes := 0
		for _, ev := range b {
			bytes += len(ev.Data)
		}
		if last := len(b[len(b)-1].Data); bytes-last >= maxBatchBytes {
			t.Fatalf("a batch of %d bytes took a message after holding %d, at least maxBatchBytes (%d)", bytes, bytes-last, maxBatchBytes)
		}
		if total+len(b) < len(msgs) && bytes < maxBatchBytes {
			t.Fatalf("a batch sent with %d bytes while more was queued, want at least maxBatchBytes (%d)", bytes, maxBatchBytes)
		}
		total += len(b)
	}
}

// TestAKeptUpTransactionGoesDownstreamOnceWithoutAnEmptyRead: while the
// stream keeps up, a transaction whose Begin and row arrive before its
// Commit goes downstream as one batch once the Commit arrives (the part
// waits for it: waitsForCommit), and a batch that ends with a Commit and
// nothing more buffered goes at once, without a read that finds the
// socket empty first (sendsAtOnce; docs/design.md, "Wake-ups at low
// rates"): no read reaches its deadline.
func TestAKeptUpTransactionGoesDownstreamOnceWithoutAnEmptyRead(t *testing.T) {
	h := runStream(t, StreamOptions{StatusInterval: time.Hour})
	c := h.srv.accept()
	for i := range 5 {
		start := pglogrepl.LSN(0x1000 * (i + 1))
		msgs := txMsgs(start, start+0x100, 1, 0, 0) // sent as committed: not behind
		c.send(msgs[:2]...)                         // Begin and the row
		time.Sleep(2 * time.Millisecond)            // the Commit comes apart
		c.send(msgs[2])
		b := h.batch(t)
		if len(b) != 3 {
			t.Fatalf("transaction %d went downstream in a batch of %d events, want Begin, row and Commit in one", i, len(b))
		}
	}
	c.mu.Lock()
	timeouts := c.timeouts
	c.mu.Unlock()
	if timeouts != 0 {
		t.Errorf("%d reads reached their deadline, want none: a batch ending with a commit goes at once", timeouts)
	}
}

// TestABatchWaitingForItsCommitGoesAtTheNextStatusUpdate: the part of a
// transaction whose Commit does not come goes downstream when the read's
// deadline, the next status update, is reached.
func TestABatchWaitingForItsCommitGoesAtTheNextStatusUpdate(t *testing.T) {
	const interval = 300 * time.Millisecond
	h := runStream(t, StreamOptions{StatusInterval: interval})
	c := h.srv.accept()
	msgs := txMsgs(0x1000, 0x1100, 1, 0, 0)
	c.send(msgs[:2]...)
	start := time.Now()
	if b := h.batch(t); len(b) != 2 {
		t.Fatalf("a batch of %d events, want the Begin and the row", len(b))
	}
	if took := time.Since(start); took > interval+5*time.Second {
		t.Errorf("the part went after %v, want it by the next status update (%v)", took, interval)
	}
}
