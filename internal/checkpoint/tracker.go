// Package checkpoint decides how far the replication slot may be confirmed.
//
// Invariant (docs/design.md, 1): the confirmed LSN never passes the commit of a
// transaction that has an outbox message not yet acknowledged by every sink
// it routes to.
//
// The pipeline tells the Tracker about the stream in stream order, from one
// goroutine: Begin a transaction, Add the deliveries each of its messages
// needs (one per sink it routes to), Commit it at the end of its commit
// record; Progress marks a point outside any transaction (a heartbeat, a
// keepalive's WAL end). Sinks acknowledge deliveries (AckAll) in any order from any
// goroutine. The Tracker keeps one entry per transaction that is not yet
// fully acknowledged, in stream order; Confirmed is the end LSN of the last
// entry of the longest fully acknowledged prefix. Entries that are already
// complete when they are committed merge into a complete tail entry, so the
// queue is bounded by the in-flight window, not by the number of
// transactions.
//
// When the stream breaks inside a transaction, the transaction is
// Abandoned: its messages already handed to sinks still have to be acked
// before anything after it is confirmed (the server sends the transaction
// again, as a new entry), but it confirms nothing itself.
//
// Tracker is safe for concurrent use.
package checkpoint

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pglogrepl"
)

// Txn is one transaction's entry in the Tracker.
type Txn struct {
	end       pglogrepl.LSN // 0 until committed, and for an abandoned txn
	pending   int
	committed bool
	// settled, when someone Waits on the transaction, is closed once it
	// is complete.
	settled chan struct{}
}

// Tracker tracks in-flight transactions. See the package documentation.
type Tracker struct {
	mu        sync.Mutex
	queue     []*Txn // in stream order; head at queue[head]
	head      int
	open      *Txn
	confirmed atomic.Uint64
	// busy is whether something is in flight (open != nil or the queue
	// is not empty), stored under mu by every change of either, so that
	// Idle, asked by the stream before every wait, takes no lock.
	busy atomic.Bool
}

// New returns a Tracker whose confirmed LSN starts at start (the slot's
// confirmed_flush_lsn).
func New(start pglogrepl.LSN) *Tracker {
	t := &Tracker{}
	t.confirmed.Store(uint64(start))
	return t
}

// Confirmed returns the highest LSN that may be confirmed to the server.
// It never decreases.
func (t *Tracker) Confirmed() pglogrepl.LSN { return pglogrepl.LSN(t.confirmed.Load()) }

// Begin opens a transaction. It panics if one is already open: the stream
// never nests transactions.
func (t *Tracker) Begin() *Txn {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open != nil {
		panic("checkpoint: Begin inside an open transaction")
	}
	txn := &Txn{}
	t.open = txn
	t.queue = append(t.queue, txn)
	t.busy.Store(true)
	return txn
}

// Add counts n more deliveries of txn that must be acknowledged before txn
// can be confirmed. Call it before handing the message to the sinks.
func (t *Tracker) Add(txn *Txn, n int) {
	t.mu.Lock()
	txn.pending += n
	t.mu.Unlock()
}

// Commit closes the open transaction txn; end is the end of its commit
// record, the position to confirm once all its deliveries are acknowledged.
func (t *Tracker) Commit(txn *Txn, end pglogrepl.LSN) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open != txn {
		panic("checkpoint: Commit of a transaction that is not open")
	}
	t.open = nil
	txn.end, txn.committed = end, true
	signal(txn)
	t.mergeTail()
	t.advance()
}

// Abandon closes the open transaction, if any, without a commit: the
// stream broke inside it and the server will send it again.
func (t *Tracker) Abandon() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open == nil {
		return
	}
	t.open.committed = true // complete once acked; end 0 confirms nothing
	signal(t.open)
	t.open = nil
	t.advance()
}

// Progress records a position outside any transaction: every transaction
// that committed before lsn has been seen. It is ignored while a
// transaction is open.
func (t *Tracker) Progress(lsn pglogrepl.LSN) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open != nil {
		return
	}
	// What a new complete entry would come to, without one (keepalives
	// and heartbeats come often at rest): with nothing in flight it is
	// popped at once, and after a complete entry mergeTail folds it in.
	switch n := len(t.queue); {
	case t.head == n:
		if lsn > pglogrepl.LSN(t.confirmed.Load()) {
			t.confirmed.Store(uint64(lsn))
		}
		return
	case complete(t.queue[n-1]):
		if last := t.queue[n-1]; lsn > last.end {
			last.end = lsn
		}
		t.advance()
		return
	}
	t.queue = append(t.queue, &Txn{end: lsn, committed: true})
	t.advance()
}

// AckAll acknowledges one delivery of each entry of txns (a sink's batch).
func (t *Tracker) AckAll(txns []*Txn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, txn := range txns {
		t.ack(txn)
	}
	t.advance()
}

func (t *Tracker) ack(txn *Txn) {
	txn.pending--
	if txn.pending < 0 {
		panic(fmt.Sprintf("checkpoint: more acks than deliveries (pending %d)", txn.pending))
	}
	signal(txn)
}

// signal wakes those waiting on txn (Wait) once it is complete. Called
// with the lock held.
func signal(txn *Txn) {
	if txn.settled != nil && complete(txn) {
		close(txn.settled)
		txn.settled = nil
	}
}

// Wait returns once txn is committed and every delivery of it was
// acknowledged (Settled), or with ctx's error.
func (t *Tracker) Wait(ctx context.Context, txn *Txn) error {
	t.mu.Lock()
	if complete(txn) {
		t.mu.Unlock()
		return nil
	}
	if txn.settled == nil {
		txn.settled = make(chan struct{})
	}
	settled := txn.settled
	t.mu.Unlock()
	select {
	case <-settled:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Oldest returns the oldest transaction with a delivery not yet
// acknowledged, nil when there is none. It returns the same entry for as
// long as that transaction is the oldest, so a caller that remembers it
// can tell for how long (the relay's metrics do, at scrape time). It takes
// the lock: it is not for the hot path.
func (t *Tracker) Oldest() *Txn {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Every complete entry at the head is popped at once (advance): the
	// head has deliveries pending, or is the open transaction, which may
	// have none yet.
	if t.head < len(t.queue) && t.queue[t.head].pending > 0 {
		return t.queue[t.head]
	}
	return nil
}

// Settled reports whether txn is committed and every delivery of it was
// acknowledged.
func (t *Tracker) Settled(txn *Txn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return complete(txn)
}

// Idle reports whether nothing is in flight: no open transaction and no
// unacknowledged delivery. It takes no lock: it reports the state after
// the last change that completed.
func (t *Tracker) Idle() bool { return !t.busy.Load() }

func complete(x *Txn) bool { return x.committed && x.pending == 0 }

// mergeTail folds a complete last entry into a complete entry before it.
func (t *Tracker) mergeTail() {
	n := len(t.queue)
	if n-t.head < 2 {
		return
	}
	last, prev := t.queue[n-1], t.queue[n-2]
	if complete(last) && complete(prev) {
		if last.end > prev.end {
			prev.end = last.end
		}
		t.queue[n-1] = nil
		t.queue = t.queue[:n-1]
	}
}

// advance pops the complete prefix and raises the confirmed LSN.
func (t *Tracker) advance() {
	old := pglogrepl.LSN(t.confirmed.Load())
	best := old
	for t.head < len(t.queue) && complete(t.queue[t.head]) {
		if e := t.queue[t.head].end; e > best {
			best = e
		}
		t.queue[t.head] = nil
		t.head++
	}
	if t.head == len(t.queue) {
		t.queue, t.head = t.queue[:0], 0
	} else if t.head > 1024 && t.head*2 > len(t.queue) {
		n := copy(t.queue, t.queue[t.head:])
		clear(t.queue[n:])
		t.queue, t.head = t.queue[:n], 0
	}
	if best > old {
		t.confirmed.Store(uint64(best))
	}
	t.busy.Store(t.open != nil || t.head < len(t.queue))
}
