package replication

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/rs/zerolog"
)

// fakeServer plays the server side of a Stream without Postgres, through
// the Stream's dial seam: each dial takes the next answer the test gave
// (a connection, or an error as Stream.connect would return it), and
// records where the stream asked to resume. The stream's waits between
// attempts are recorded and return at once.
type fakeServer struct {
	answers chan dialAnswer

	mu      sync.Mutex
	resumes []pglogrepl.LSN
	waits   []time.Duration
}

type dialAnswer struct {
	c   *fakeConn
	err error
}

func newFakeServer() *fakeServer { return &fakeServer{answers: make(chan dialAnswer, 16)} }

func (f *fakeServer) dial(ctx context.Context, resume pglogrepl.LSN) (conn, error) {
	f.mu.Lock()
	f.resumes = append(f.resumes, resume)
	f.mu.Unlock()
	select {
	case a := <-f.answers:
		if a.err != nil {
			return nil, a.err
		}
		a.c.mu.Lock()
		a.c.resume = resume
		a.c.mu.Unlock()
		close(a.c.dialed)
		return a.c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fakeServer) sleep(ctx context.Context, d time.Duration) bool {
	f.mu.Lock()
	f.waits = append(f.waits, d)
	f.mu.Unlock()
	return ctx.Err() == nil
}

// accept answers the next dial with a new connection, which it returns;
// the test queues the server's messages on it.
func (f *fakeServer) accept() *fakeConn {
	c := &fakeConn{wake: make(chan struct{}, 1), dialed: make(chan struct{}), closed: make(chan struct{})}
	f.answers <- dialAnswer{c: c}
	return c
}

// refuse answers the next dial with err.
func (f *fakeServer) refuse(err error) { f.answers <- dialAnswer{err: err} }

// dials returns the number of dials so far.
func (f *fakeServer) dials() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.resumes)
}

// waitsSoFar returns the stream's waits between attempts so far.
func (f *fakeServer) waitsSoFar() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.waits...)
}

// fakeConn is one scripted replication connection: the test queues the
// server's messages (send) and ends it (drop); it records the client's
// status updates. Like a socket, a read takes what is queued, and else
// waits for more or for the read deadline.
type fakeConn struct {
	wake   chan struct{} // a message was queued or the deadline changed
	dialed chan struct{} // closed when a dial returned the connection
	closed chan struct{} // closed by Close

	mu       sync.Mutex
	resume   pglogrepl.LSN // where START_REPLICATION began
	queue    []pgproto3.BackendMessage
	err      error // once the queue is empty: the connection broke
	deadline time.Time
	received int // messages the client took
	timeouts int // reads that returned at their deadline
	statuses []sentStatus
}

// sentStatus is a standby status update the client sent: its position,
// and how many messages it had taken from the connection then.
type sentStatus struct {
	lsn      pglogrepl.LSN
	received int
}

func (c *fakeConn) notify() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// send queues server messages.
func (c *fakeConn) send(msgs ...pgproto3.BackendMessage) {
	c.mu.Lock()
	c.queue = append(c.queue, msgs...)
	c.mu.Unlock()
	c.notify()
}

// drop breaks the connection once the queued messages are read.
func (c *fakeConn) drop() {
	c.mu.Lock()
	c.err = errors.New("fake: connection reset by peer")
	c.mu.Unlock()
	c.notify()
}

func (c *fakeConn) ReceiveMessage() (pgproto3.BackendMessage, error) {
	for {
		c.mu.Lock()
		if len(c.queue) > 0 {
			msg := c.queue[0]
			c.queue = c.queue[1:]
			c.received++
			c.mu.Unlock()
			return msg, nil
		}
		err, d := c.err, c.deadline
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if d.IsZero() {
			<-c.wake
			continue
		}
		wait := time.Until(d)
		if wait <= 0 {
			c.mu.Lock()
			c.timeouts++
			c.mu.Unlock()
			return nil, errReadDeadline
		}
		t := time.NewTimer(wait)
		select {
		case <-c.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

func (c *fakeConn) SendStatus(lsn pglogrepl.LSN, _ time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.statuses = append(c.statuses, sentStatus{lsn: lsn, received: c.received})
	return nil
}

func (c *fakeConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	c.notify()
	return nil
}

func (c *fakeConn) Buffered() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue) > 0
}

func (c *fakeConn) Close() { close(c.closed) }

// statusesSoFar returns the status updates the client sent so far.
func (c *fakeConn) statusesSoFar() []sentStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]sentStatus(nil), c.statuses...)
}

// startedAt waits until a dial returned c and returns where it resumed.
func (c *fakeConn) startedAt(t *testing.T) pglogrepl.LSN {
	t.Helper()
	select {
	case <-c.dialed:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not connect within 10s")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resume
}

// fakeConfirmer is a Confirmer the test moves.
type fakeConfirmer struct {
	mu        sync.Mutex
	confirmed pglogrepl.LSN
	busy      bool
}

func (f *fakeConfirmer) Confirmed() pglogrepl.LSN {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.confirmed
}

func (f *fakeConfirmer) Idle() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.busy
}

func (f *fakeConfirmer) set(lsn pglogrepl.LSN) {
	f.mu.Lock()
	f.confirmed = lsn
	f.mu.Unlock()
}

// harness runs a Stream against a fakeServer until the test ends.
type harness struct {
	srv     *fakeServer
	cp      *fakeConfirmer
	stream  *Stream
	out     chan []Event
	drained chan struct{}
	stop    context.CancelFunc
	ran     chan error // Run's result
	pending []Event    // events of a batch taken but not yet returned by next
}

// runStream starts Run on a stream whose dials go to a fakeServer. Tests
// accept (or refuse) its connections.
func runStream(t *testing.T, opt StreamOptions) *harness {
	t.Helper()
	h := newHarness(t, opt)
	h.run(t)
	return h
}

func newHarness(t *testing.T, opt StreamOptions) *harness {
	h := &harness{srv: newFakeServer(), cp: &fakeConfirmer{}, out: make(chan []Event, 64),
		drained: make(chan struct{}), ran: make(chan error, 1)}
	opt.Slot = "fake_slot"
	opt.Drained = h.drained
	opt.Log = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	h.stream = NewStream(opt, h.cp)
	h.stream.dial = h.srv.dial
	h.stream.sleep = h.srv.sleep
	return h
}

func (h *harness) run(t *testing.T) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	h.stop = stop
	go func() { h.ran <- h.stream.Run(ctx, context.Background(), h.out) }()
	t.Cleanup(func() {
		stop()
		h.closeDrained()
		go func() {
			for range h.out {
			}
		}()
		select {
		case <-h.ran:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of its context ending")
		}
	})
}

func (h *harness) closeDrained() {
	select {
	case <-h.drained:
	default:
		close(h.drained)
	}
}

// batch returns the next batch the stream sent downstream.
func (h *harness) batch(t *testing.T) []Event {
	t.Helper()
	select {
	case b, ok := <-h.out:
		if !ok {
			t.Fatal("the stream closed its output")
		}
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("no batch from the stream within 10s")
	}
	return nil
}

// next returns the next event the stream sent downstream.
func (h *harness) next(t *testing.T) Event {
	t.Helper()
	for len(h.pending) == 0 {
		h.pending = h.batch(t)
	}
	ev := h.pending[0]
	h.pending = h.pending[1:]
	return ev
}

// result waits for Run to return and returns its error.
func (h *harness) result(t *testing.T) error {
	t.Helper()
	go func() {
		for range h.out {
		}
	}()
	select {
	case err := <-h.ran:
		h.ran <- err // for the cleanup
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s")
	}
	return nil
}

// waitFor polls cond until it holds or 10s passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Wire messages. Times are µs since 2000 on the server's clock.

// xLogData is an XLogData at walStart sent at sendTime carrying a pgoutput
// message.
func xLogData(walStart pglogrepl.LSN, sendTime int64, msg []byte) *pgproto3.CopyData {
	b := make([]byte, 25, 25+len(msg))
	b[0] = pglogrepl.XLogDataByteID
	binary.BigEndian.PutUint64(b[1:], uint64(walStart))
	binary.BigEndian.PutUint64(b[9:], uint64(walStart))
	binary.BigEndian.PutUint64(b[17:], uint64(sendTime))
	return &pgproto3.CopyData{Data: append(b, msg...)}
}

// beginMsg is a pgoutput Begin of a transaction committed at commitTime.
func beginMsg(final pglogrepl.LSN, commitTime int64) []byte {
	b := make([]byte, 21)
	b[0] = 'B'
	binary.BigEndian.PutUint64(b[1:], uint64(final))
	binary.BigEndian.PutUint64(b[9:], uint64(commitTime))
	return b
}

// commitMsg is a pgoutput Commit ending at end.
func commitMsg(end pglogrepl.LSN) []byte {
	b := make([]byte, 26)
	b[0] = 'C'
	binary.BigEndian.PutUint64(b[2:], uint64(end-1))
	binary.BigEndian.PutUint64(b[10:], uint64(end))
	return b
}

// insertMsg stands for a pgoutput Insert of n bytes.
func insertMsg(n int) []byte {
	b := make([]byte, n)
	b[0] = 'I'
	return b
}

// keepaliveMsg is a primary keepalive with the server's WAL end.
func keepaliveMsg(walEnd pglogrepl.LSN, reply bool) *pgproto3.CopyData {
	b := make([]byte, 18)
	b[0] = pglogrepl.PrimaryKeepaliveMessageByteID
	binary.BigEndian.PutUint64(b[1:], uint64(walEnd))
	if reply {
		b[17] = 1
	}
	return &pgproto3.CopyData{Data: b}
}

// txMsgs is a transaction of rows inserts at start.. committed at
// commitTime and sent at sendTime, whose commit ends at end.
func txMsgs(start, end pglogrepl.LSN, rows int, commitTime, sendTime int64) []pgproto3.BackendMessage {
	msgs := []pgproto3.BackendMessage{xLogData(start, sendTime, beginMsg(end-1, commitTime))}
	for i := range rows {
		msgs = append(msgs, xLogData(start+pglogrepl.LSN(i), sendTime, insertMsg(40)))
	}
	return append(msgs, xLogData(end, sendTime, commitMsg(end)))
}
