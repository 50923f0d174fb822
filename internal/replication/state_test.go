package replication

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Tests of the session state machine alone: no connection, no clock.

// countingConfirmer counts how often the state asks for the position.
type countingConfirmer struct {
	confirmed pglogrepl.LSN
	idle      bool
	calls     int
}

func (c *countingConfirmer) Confirmed() pglogrepl.LSN { c.calls++; return c.confirmed }
func (c *countingConfirmer) Idle() bool               { c.calls++; return c.idle }

// feed hands the state the payloads of msgs, failing the test on an error.
func feed(t *testing.T, st *sessionState, msgs ...pgproto3.BackendMessage) (last received) {
	t.Helper()
	for _, m := range msgs {
		r, err := st.copyData(m.(*pgproto3.CopyData).Data)
		if err != nil {
			t.Fatal(err)
		}
		last = r
	}
	return last
}

func TestResumeMovesOnlyOnceTheEventsBeforeItWentDownstream(t *testing.T) {
	st := newSessionState(0x10, time.Second)
	feed(t, &st, txMsgs(0x100, 0x1A0, 2, 0, 0)...)
	if st.resume != 0x10 {
		t.Fatalf("resume %v with the commit still in the open batch, want 0/10", st.resume)
	}
	if got := st.batchSent(); got != 0x1A0 || st.resume != 0x1A0 {
		t.Fatalf("resume after the batch went downstream %v, want the commit's end 0/1A0", got)
	}
	feed(t, &st, txMsgs(0x200, 0x2A0, 1, 0, 0)[:2]...) // a transaction not yet complete
	if got := st.batchSent(); got != 0x1A0 {
		t.Fatalf("resume %v inside a transaction, want the last commit's end 0/1A0", got)
	}
}

func TestKeepaliveMovesTheResumePointOnlyOutsideATransactionAndOnlyForward(t *testing.T) {
	st := newSessionState(0x500, time.Second)
	feed(t, &st, keepaliveMsg(0x400, false))
	if got := st.batchSent(); got != 0x500 {
		t.Fatalf("a keepalive behind the resume point moved it to %v", got)
	}
	feed(t, &st, keepaliveMsg(0x600, false))
	if got := st.batchSent(); got != 0x600 {
		t.Fatalf("resume %v after a keepalive outside a transaction, want its WAL end 0/600", got)
	}
	feed(t, &st, xLogData(0x700, 0, beginMsg(0x7A0, 0)), keepaliveMsg(0x800, false))
	if got := st.batchSent(); got != 0x600 {
		t.Fatalf("resume %v after a keepalive inside a transaction, want it unmoved at 0/600", got)
	}
}

func TestKeepaliveReportsTheServersWALEndAndWhetherItAsksForAReply(t *testing.T) {
	var st sessionState
	r := feed(t, &st, keepaliveMsg(0x900, true))
	if !r.keepalive || r.serverWAL != 0x900 || !r.reply {
		t.Fatalf("got %+v, want a keepalive at 0/900 asking for a reply", r)
	}
	if len(st.batch) != 1 || st.batch[0].Kind != Keepalive || st.batch[0].LSN != 0x900 {
		t.Fatalf("batch %v, want the keepalive event", st.batch)
	}
}

func TestStatusIsDueWhenThePositionMovedAndTenMillisecondsPassedOrTheIntervalPassed(t *testing.T) {
	t0 := time.Unix(1000, 0)
	st := newSessionState(0, time.Second)
	cp := &countingConfirmer{confirmed: 0x10}
	st.statusSent(0x10, t0)
	if st.statusDue(t0.Add(500*time.Millisecond), cp) {
		t.Error("status due with the position unmoved before the interval")
	}
	if !st.statusDue(t0.Add(time.Second), cp) {
		t.Error("status not due once StatusInterval passed")
	}
	cp.confirmed = 0x20
	if st.statusDue(t0.Add(pollPending-time.Microsecond), cp) {
		t.Error("status due with the position moved less than 10 ms after the last update")
	}
	if !st.statusDue(t0.Add(pollPending), cp) {
		t.Error("status not due with the position moved 10 ms after the last update")
	}
}

// The loop asks statusDue per message: it must not ask the confirmer
// (another goroutine's position) unless an update could be due.
func TestStatusCheckAsksTheConfirmerOnlyWhenAnUpdateCouldBeDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	st := newSessionState(0, time.Second)
	cp := &countingConfirmer{confirmed: 0x20}
	st.statusSent(0x10, t0)
	for i := range 100 {
		st.statusDue(t0.Add(time.Duration(i)*pollPending/100), cp)
	}
	if cp.calls != 0 {
		t.Errorf("%d calls to the confirmer within 10 ms of the last update, want 0", cp.calls)
	}
}

func TestReadDeadlineIsInThePastWhileABatchIsOpenAndSetOnlyWhenItChanges(t *testing.T) {
	t0 := time.Unix(1000, 0)
	st := newSessionState(0, time.Second)
	cp := &countingConfirmer{idle: true}
	st.statusSent(0, t0)
	if d, set := st.readDeadline(t0, cp); !set || !d.Equal(t0.Add(time.Second)) {
		t.Fatalf("idle deadline %v (set %v), want the next status update at %v", d, set, t0.Add(time.Second))
	}
	if _, set := st.readDeadline(t0.Add(time.Millisecond), cp); set {
		t.Error("the same deadline set again")
	}
	feed(t, &st, keepaliveMsg(0x10, false))
	if d, set := st.readDeadline(t0, cp); !set || !d.Equal(pastDeadline) {
		t.Fatalf("deadline with a batch open %v (set %v), want pastDeadline", d, set)
	}
	if _, set := st.readDeadline(t0, cp); set {
		t.Error("pastDeadline set again while the batch stays open")
	}
	if st.deadlineReached() != deadlineFlush {
		t.Error("a read that reached pastDeadline does not send the batch")
	}
	st.batchSent()
	if d, set := st.readDeadline(t0, cp); !set || !d.Equal(t0.Add(time.Second)) {
		t.Fatalf("deadline after the batch went %v (set %v), want the next status update", d, set)
	}
}

func TestReadDeadlineIsPollPendingAfterTheLastStatusWhileSomethingIsInFlightAndTwoMillisecondsWhileBehind(t *testing.T) {
	t0 := time.Unix(1000, 0)
	st := newSessionState(0, time.Second)
	st.statusSent(0x10, t0)
	cp := &countingConfirmer{confirmed: 0x10, idle: false}
	if d, _ := st.readDeadline(t0, cp); !d.Equal(t0.Add(pollPending)) {
		t.Errorf("deadline %v with messages in flight, want the last status + pollPending", d)
	}
	// Reads between two updates keep that deadline: no timer reset per
	// message, even after a poll of the buffered bytes.
	st.batch = []Event{{Kind: Keepalive}}
	st.readDeadline(t0.Add(pollPending/2), cp)
	st.batch = nil
	if d, _ := st.readDeadline(t0.Add(pollPending/2), cp); !d.Equal(t0.Add(pollPending)) {
		t.Errorf("deadline %v later in the same interval, want the last status + pollPending", d)
	}
	cp.idle = true
	cp.confirmed = 0x20
	later := t0.Add(2 * pollPending)
	if d, _ := st.readDeadline(later, cp); !d.Equal(later.Add(pollPending)) {
		t.Errorf("deadline %v with a position not yet reported and the interval passed, want now+pollPending", d)
	}
	st.behind = true
	if d, _ := st.readDeadline(later.Add(time.Millisecond), cp); !d.Equal(later.Add(3 * time.Millisecond)) {
		t.Errorf("deadline %v while behind, want now+behindWait", d)
	}
}

func TestBehindStartsWhenAMessageComes100msAfterItsCommitAndStopsUnder20ms(t *testing.T) {
	var st sessionState
	r := feed(t, &st, xLogData(0x100, behindMicros-1, beginMsg(0x1A0, 0)))
	if r.switchBehind {
		t.Fatalf("switch asked at a lag under 100 ms: %+v", r)
	}
	r = feed(t, &st, xLogData(0x101, behindMicros, insertMsg(10)))
	if !r.switchBehind || !r.behind {
		t.Fatalf("no switch on at a lag of 100 ms: %+v", r)
	}
	if !st.setBehind(true) {
		t.Fatal("setBehind(true) did not report a start")
	}
	if r = feed(t, &st, xLogData(0x102, caughtUpMicros, insertMsg(10))); r.switchBehind {
		t.Fatalf("switch asked at a lag of 20 ms (between the thresholds): %+v", r)
	}
	if r = feed(t, &st, xLogData(0x1A0, 0, commitMsg(0x1A0))); r.switchBehind {
		t.Fatalf("switch asked for a commit (outside the transaction): %+v", r)
	}
	r = feed(t, &st, xLogData(0x200, 1_000_000+caughtUpMicros-1, beginMsg(0x2A0, 1_000_000)))
	if !r.switchBehind || r.behind {
		t.Fatalf("no switch off at a lag under 20 ms: %+v", r)
	}
}

func TestAWaitWhileBehindThatEndsByTheDeadlineIsCaughtUp(t *testing.T) {
	var st sessionState
	if st.deadlineReached() != deadlineNothing {
		t.Fatal("a deadline reached while reading eagerly calls for something")
	}
	st.setBehind(true)
	if st.deadlineReached() != deadlineCaughtUp {
		t.Fatal("a wait while behind that ended by the deadline is not caught up")
	}
	st.setBehind(false)
	if st.behind {
		t.Fatal("still behind after caught up")
	}
}

func TestEventDataIsACopyAndAppendingToItNeverOverwritesAnother(t *testing.T) {
	var st sessionState
	buf := xLogData(0x100, 0, insertMsg(100)).Data
	small := make([]byte, len(buf))
	for i := range 3 {
		copy(small, buf)
		small[25+1] = byte(i)
		if _, err := st.copyData(small); err != nil {
			t.Fatal(err)
		}
	}
	large := xLogData(0x200, 0, insertMsg(slabSize)).Data
	if _, err := st.copyData(large); err != nil {
		t.Fatal(err)
	}
	large[25+1] = 0xFF // the connection reuses its buffer
	for i, ev := range st.batch[:3] {
		if ev.Data[1] != byte(i) || cap(ev.Data) != len(ev.Data) {
			t.Fatalf("event %d: data %v… (cap %d, len %d), want its own bytes, capped", i, ev.Data[:2], cap(ev.Data), len(ev.Data))
		}
	}
	if d := st.batch[3].Data; d[1] != 0 || len(d) != slabSize {
		t.Fatal("a large message's data aliases the connection's buffer")
	}
	if st.batchBytes != 3*100+slabSize {
		t.Errorf("batchBytes %d, want %d", st.batchBytes, 3*100+slabSize)
	}
}

func TestTruncatedXLogDataIsAnError(t *testing.T) {
	var st sessionState
	if _, err := st.copyData(xLogData(0x100, 0, nil).Data[:24]); err == nil {
		t.Fatal("a 24-byte XLogData parsed")
	}
	if _, err := st.copyData(keepaliveMsg(0x100, false).Data[:10]); err == nil {
		t.Fatal("a truncated keepalive parsed")
	}
}

// While a backlog is read (behind) and until a status update reported
// everything read as confirmed, a moved position is reported every
// pollBehind; then every pollPending again.
func TestStatusGoesEveryPollBehindWhileABacklogIsReadAndUntilItIsConfirmed(t *testing.T) {
	t0 := time.Unix(1000, 0)
	st := newSessionState(0x10, time.Second)
	st.statusSent(0x10, t0)
	cp := &countingConfirmer{confirmed: 0x20}
	if st.statusDue(t0.Add(pollBehind), cp) {
		t.Fatal("status due after pollBehind while keeping up")
	}
	st.setBehind(true)
	if !st.statusDue(t0.Add(pollBehind), cp) {
		t.Fatal("no status due after pollBehind while behind")
	}
	feed(t, &st, txMsgs(0x100, 0x1A0, 2, 0, 0)...)
	st.batchSent()
	st.setBehind(false) // caught up: the last acks are still to come
	st.statusSent(0x20, t0)
	cp.confirmed = 0x100
	if !st.statusDue(t0.Add(pollBehind), cp) {
		t.Fatal("no status due after pollBehind while the backlog's last acks come in")
	}
	if d, _ := st.readDeadline(t0, cp); !d.Equal(t0.Add(pollBehind)) {
		t.Errorf("read deadline %v while the backlog's last acks come in, want the last status + pollBehind", d)
	}
	st.statusSent(0x1A0, t0) // the backlog's last commit is confirmed
	cp.confirmed = 0x1B0
	if st.statusDue(t0.Add(pollBehind), cp) {
		t.Error("status still due every pollBehind after the whole backlog was confirmed")
	}
	if !st.statusDue(t0.Add(pollPending), cp) {
		t.Error("no status due after pollPending once caught up")
	}
}

// TestABatchNoLargerThanTheLastOneIsOneAllocation: the events of a
// single-row transaction (Begin, Insert, Commit) take one allocation for
// the batch, not one per doubling, and a catch-up's batch starts with the
// room its predecessor needed.
func TestABatchNoLargerThanTheLastOneIsOneAllocation(t *testing.T) {
	st := newSessionState(0x10, time.Second)
	st.slab = make([]byte, 0, 1<<20) // message bytes: no slab allocation in the count
	var payloads [][]byte
	for _, m := range txMsgs(0x100, 0x1A0, 1, 0, 0) {
		payloads = append(payloads, m.(*pgproto3.CopyData).Data)
	}
	if a := testing.AllocsPerRun(100, func() {
		for _, p := range payloads {
			if _, err := st.copyData(p); err != nil {
				t.Fatal(err)
			}
		}
		st.batchSent()
	}); a != 1 {
		t.Errorf("%v allocations per batch of %d events, want 1", a, len(payloads))
	}
	for range 300 {
		feed(t, &st, txMsgs(0x100, 0x1A0, 1, 0, 0)[1])
	}
	st.batchSent()
	feed(t, &st, txMsgs(0x100, 0x1A0, 1, 0, 0)[1])
	if cap(st.batch) < 300 {
		t.Errorf("a batch after one of 300 events starts with room for %d", cap(st.batch))
	}
}
