package sentat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"
	"github.com/walpost/walpost/internal/testutil"
)

// fakeTracker is the position every sink acknowledged, set by the test.
type fakeTracker struct {
	mu sync.Mutex
	c  pglogrepl.LSN
}

func (f *fakeTracker) Confirmed() pglogrepl.LSN { f.mu.Lock(); defer f.mu.Unlock(); return f.c }
func (f *fakeTracker) Idle() bool               { return false }
func (f *fakeTracker) set(c pglogrepl.LSN) {
	f.mu.Lock()
	f.c = max(f.c, c)
	f.mu.Unlock()
}

// fakeDB stands in for PostgreSQL: a transaction's rows exist for other
// sessions once the test made it visible; Mark sets sent-at on the rows
// it finds, as the UPDATE does.
type fakeDB struct {
	mu         sync.Mutex
	visible    map[uint32]bool   // transactions visible to other sessions
	xidOf      map[string]uint32 // row id → its transaction
	marked     map[string]bool
	deleted    map[string]bool
	statements int
}

func newFakeDB() *fakeDB {
	return &fakeDB{visible: map[uint32]bool{}, xidOf: map[string]uint32{}, marked: map[string]bool{}, deleted: map[string]bool{}}
}

// commit records a transaction's rows, visible or not yet.
func (f *fakeDB) commit(xid uint32, ids []string, visible bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		f.xidOf[id] = xid
	}
	f.visible[xid] = f.visible[xid] || visible
}

func (f *fakeDB) show(xid uint32) { f.mu.Lock(); f.visible[xid] = true; f.mu.Unlock() }

func (f *fakeDB) isMarked(id string) bool { f.mu.Lock(); defer f.mu.Unlock(); return f.marked[id] }

func (f *fakeDB) Visible(_ context.Context, xids []uint32) ([]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]bool, len(xids))
	for i, x := range xids {
		out[i] = f.visible[x]
	}
	return out, nil
}

func (f *fakeDB) Mark(_ context.Context, ids []string) (set, already int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(ids) > maxBatch {
		panic(fmt.Sprintf("a statement of %d ids", len(ids)))
	}
	f.statements++
	for _, id := range ids {
		x, ok := f.xidOf[id]
		switch {
		case !ok || !f.visible[x] || f.deleted[id]: // not found
		case f.marked[id]:
			already++
		default:
			f.marked[id] = true
			set++
		}
	}
	return set, already, nil
}

func (f *fakeDB) Close() {}

// markRound runs one marking round and fails the test on an error other
// than a transaction not visible yet.
func markRound(t *testing.T, m *Marker) *NotVisibleError {
	t.Helper()
	err := m.markConfirmed(context.Background())
	var nv *NotVisibleError
	if err != nil && !errors.As(err, &nv) {
		t.Fatal(err)
	}
	return nv
}

// TestConfirmedNeverPassesAnUnmarkedTransaction: whatever the order of
// commits, their becoming visible to other sessions, tracker
// confirmations, marking rounds and reads, the position the stream may
// confirm never passes a transaction with a row whose sent-at is not set
// and never decreases (docs/design.md, invariant 10). A transaction is
// often acknowledged before its commit is visible (the UPDATE would not
// find its rows then); some rows are deleted, some marked already (a
// transaction streamed again). Transactions larger than one statement
// are marked in several.
func TestConfirmedNeverPassesAnUnmarkedTransaction(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		tr := &fakeTracker{}
		db := newFakeDB()
		m := newMarker(db, tr, zerolog.Nop())
		type txn struct {
			end pglogrepl.LSN
			xid uint32
			ids []string
		}
		var txns []txn
		lsn, last, xid := pglogrepl.LSN(100), pglogrepl.LSN(0), uint32(1<<32-20) // wraps around
		for step := range 500 {
			switch r.IntN(5) {
			case 0:
				lsn += pglogrepl.LSN(1 + r.IntN(50))
				xid++
				n := 1 + r.IntN(3)
				if r.IntN(20) == 0 {
					n = maxBatch + r.IntN(2*maxBatch) // more than one statement
				}
				ids := make([]string, n)
				for i := range ids {
					ids[i] = fmt.Sprintf("%d-%d", step, i)
				}
				db.commit(xid, ids, r.IntN(2) == 0)
				switch r.IntN(10) {
				case 0: // deleted (retention, delete-after-insert) once visible
					db.mu.Lock()
					db.deleted[ids[0]] = true
					db.mu.Unlock()
				case 1: // marked already (streamed again)
					db.mu.Lock()
					db.marked[ids[len(ids)-1]] = true
					db.mu.Unlock()
				}
				if err := m.Add(context.Background(), lsn, xid, ids); err != nil {
					t.Fatal(err)
				}
				txns = append(txns, txn{lsn, xid, ids})
			case 1:
				if len(txns) > 0 {
					tr.set(txns[r.IntN(len(txns))].end)
				}
			case 2:
				if len(txns) > 0 {
					db.show(txns[r.IntN(len(txns))].xid)
				}
			case 3:
				markRound(t, m)
			case 4:
				got := m.Confirmed()
				if got < last {
					t.Fatalf("seed %d: Confirmed went back from %s to %s", seed, last, got)
				}
				last = got
				for _, x := range txns {
					if x.end > got {
						continue
					}
					// Rows are marked in statement order: the first, middle
					// and last rows stand for the others.
					for _, id := range []string{x.ids[0], x.ids[len(x.ids)/2], x.ids[len(x.ids)-1]} {
						if !db.isMarked(id) && !db.deleted[id] {
							t.Fatalf("seed %d: Confirmed %s passes transaction %s (xid %d), whose row %s is not marked", seed, got, x.end, x.xid, id)
						}
					}
				}
			}
		}
		// Once everything is visible and confirmed, everything is marked
		// and confirmed.
		for _, x := range txns {
			db.show(x.xid)
		}
		tr.set(lsn)
		if nv := markRound(t, m); nv != nil {
			t.Fatalf("seed %d: %v with every transaction visible", seed, nv)
		}
		if got := m.Confirmed(); got != lsn {
			t.Fatalf("seed %d: Confirmed %s at the end, want %s", seed, got, lsn)
		}
	}
}

// TestInvisibleTransactionHoldsTheSlotUntilItIsVisible: a transaction
// every sink acknowledged whose commit is not visible to other sessions
// yet is not marked (its rows would not be found), the round says which
// transaction it waits for, and the slot stays before it, also for the
// visible transactions after it; once it is visible, the next round marks
// them all and the slot moves past them.
func TestInvisibleTransactionHoldsTheSlotUntilItIsVisible(t *testing.T) {
	tr := &fakeTracker{c: 50}
	db := newFakeDB()
	m := newMarker(db, tr, zerolog.Nop())
	a, b := []string{"a1", "a2"}, []string{"b1", "b2"}
	db.commit(7, a, false)
	db.commit(8, b, true)
	if err := m.Add(context.Background(), 100, 7, a); err != nil {
		t.Fatal(err)
	}
	if err := m.Add(context.Background(), 200, 8, b); err != nil {
		t.Fatal(err)
	}
	tr.set(200)
	for range 3 {
		nv := markRound(t, m)
		if nv == nil || nv.Xid != 7 || nv.End != 100 || nv.Rows != 2 {
			t.Fatalf("round: %v, want transaction 7 not visible", nv)
		}
		if c := m.Confirmed(); c != 50 {
			t.Fatalf("Confirmed %s with transaction 7 not visible, want 0/32 (before it)", c)
		}
	}
	if db.statements != 0 {
		t.Fatalf("%d UPDATEs ran with the first transaction not visible", db.statements)
	}
	db.show(7)
	if nv := markRound(t, m); nv != nil {
		t.Fatalf("round: %v with everything visible", nv)
	}
	for _, id := range append(a, b...) {
		if !db.isMarked(id) {
			t.Fatalf("row %s not marked", id)
		}
	}
	if c := m.Confirmed(); c != 200 {
		t.Fatalf("Confirmed %s, want 0/C8", c)
	}
}

// TestRowsTheUpdateDoesNotFindAreMarkedAlreadyOrGone: in a visible
// transaction, a row marked before (a transaction streamed again) or
// deleted (retention, delete-after-insert) does not hold the slot.
func TestRowsTheUpdateDoesNotFindAreMarkedAlreadyOrGone(t *testing.T) {
	tr := &fakeTracker{}
	db := newFakeDB()
	m := newMarker(db, tr, zerolog.Nop())
	ids := []string{"new", "sent", "deleted"}
	db.commit(9, ids, true)
	db.marked["sent"], db.deleted["deleted"] = true, true
	if err := m.Add(context.Background(), 100, 9, ids); err != nil {
		t.Fatal(err)
	}
	tr.set(100)
	if nv := markRound(t, m); nv != nil {
		t.Fatal(nv)
	}
	if !db.isMarked("new") || m.Confirmed() != 100 || m.Pending() != 0 {
		t.Fatalf("marked %v, Confirmed %s, %d pending; want the row marked and the transaction confirmed", db.isMarked("new"), m.Confirmed(), m.Pending())
	}
}

// TestFlushWaitsForAnInvisibleTransactionThenLeavesItUnconfirmed: at
// shutdown the last marking waits, within its timeout, for a transaction
// that is not visible yet; it marks it when it becomes visible in time,
// and otherwise leaves it unmarked and the position before it, so the
// stream's last status does not pass it.
func TestFlushWaitsForAnInvisibleTransactionThenLeavesItUnconfirmed(t *testing.T) {
	for _, visibleAfter := range []time.Duration{50 * time.Millisecond, -1} {
		tr := &fakeTracker{c: 50}
		db := newFakeDB()
		var logs bytes.Buffer
		m := newMarker(db, tr, zerolog.New(&logs))
		db.commit(7, []string{"a"}, false)
		if err := m.Add(context.Background(), 100, 7, []string{"a"}); err != nil {
			t.Fatal(err)
		}
		tr.set(100)
		if visibleAfter > 0 {
			time.AfterFunc(visibleAfter, func() { db.show(7) })
		}
		m.Flush(300 * time.Millisecond)
		if visibleAfter > 0 {
			if !db.isMarked("a") || m.Confirmed() != 100 {
				t.Fatalf("visible during Flush: marked %v, Confirmed %s", db.isMarked("a"), m.Confirmed())
			}
			continue
		}
		if db.isMarked("a") || m.Confirmed() != 50 {
			t.Fatalf("never visible: marked %v, Confirmed %s; want unmarked and 0/32", db.isMarked("a"), m.Confirmed())
		}
		if !strings.Contains(logs.String(), `"xid":7`) || !strings.Contains(logs.String(), "not visible") {
			t.Fatalf("Flush did not say what it left unmarked: %s", logs.String())
		}
	}
}

// TestRunSaysWhichTransactionItWaitsFor: while a transaction to mark is
// not visible, Run asks again (soon, backing off) and, after a second,
// logs its xid and commit; once it is visible, it marks it.
func TestRunSaysWhichTransactionItWaitsFor(t *testing.T) {
	tr := &fakeTracker{}
	db := newFakeDB()
	var logs testutil.Buffer
	m := newMarker(db, tr, zerolog.New(&logs))
	db.commit(4000000000, []string{"a"}, false)
	if err := m.Add(context.Background(), 100, 4000000000, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	tr.set(100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx, 100*time.Millisecond) }()
	defer func() { cancel(); <-done }()
	await(t, 5*time.Second, "the log of the wait", func() bool {
		return strings.Contains(logs.String(), `"xid":4000000000,"lsn":"0/64"`)
	})
	if m.Confirmed() != 0 {
		t.Fatalf("Confirmed %s while the transaction is not visible", m.Confirmed())
	}
	db.show(4000000000)
	await(t, 5*time.Second, "the row marked and confirmed", func() bool { return db.isMarked("a") && m.Confirmed() == 100 })
}

// TestAddWaitsWhileTooManyIdsWaitToBeMarked: past maxPending ids Add
// waits until a round marked some (or its context ends), so a failing
// UPDATE bounds memory instead of queueing every id.
func TestAddWaitsWhileTooManyIdsWaitToBeMarked(t *testing.T) {
	tr := &fakeTracker{}
	db := newFakeDB()
	m := newMarker(db, tr, zerolog.Nop())
	big := make([]string, maxPending)
	for i := range big {
		big[i] = fmt.Sprint(i)
	}
	db.commit(3, big, true)
	if err := m.Add(context.Background(), 10, 3, big); err != nil { // alone: accepted
		t.Fatal(err)
	}
	if !m.Full(1) {
		t.Fatal("Full(1) is false with maxPending ids waiting")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := m.Add(ctx, 20, 4, []string{"x"}); err != context.DeadlineExceeded {
		t.Fatalf("Add past maxPending returned %v, want to wait until its context ended", err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Add(context.Background(), 20, 4, []string{"x"}) }()
	tr.set(10)
	markRound(t, m)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Add still waits after the marking caught up")
	}
}

// await polls cond every 10 ms until it holds or timeout passes.
func await(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(timeout); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

// failingDB fails every statement with err.
type failingDB struct{ err error }

func (f failingDB) Visible(context.Context, []uint32) ([]bool, error) { return nil, f.err }
func (f failingDB) Mark(context.Context, []string) (int, int, error)  { return 0, 0, f.err }
func (f failingDB) Close()                                            {}

// TestRunEndsWhenTheServerShutsDown: a server that terminates the
// marking connection for its shutdown, or refuses a new one while it
// stops, ends Run with ErrServerGone (the relay ends the cycle, so the
// WAL sender, which waits for the relay to confirm all it sent, can
// exit and the server stop); any other failure is retried.
func TestRunEndsWhenTheServerShutsDown(t *testing.T) {
	for _, code := range []string{"57P01", "57P02", "57P03"} {
		tr := &fakeTracker{}
		m := newMarker(failingDB{&pgconn.PgError{Severity: "FATAL", Code: code}}, tr, zerolog.Nop())
		if err := m.Add(context.Background(), 100, 7, []string{"a"}); err != nil {
			t.Fatal(err)
		}
		tr.set(100)
		done := make(chan error, 1)
		go func() { done <- m.Run(context.Background(), 10*time.Millisecond) }()
		select {
		case err := <-done:
			var pe *pgconn.PgError
			if !errors.Is(err, ErrServerGone) || !errors.As(err, &pe) || pe.Code != code {
				t.Errorf("%s: Run returned %v, want ErrServerGone wrapping the server's error", code, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Run still retries 5 s after the server said it shuts down", code)
		}
	}
	tr := &fakeTracker{}
	m := newMarker(failingDB{&pgconn.PgError{Code: "40P01"}}, tr, zerolog.Nop()) // a deadlock: retried
	if err := m.Add(context.Background(), 100, 7, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	tr.set(100)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := m.Run(ctx, 10*time.Millisecond); err != nil {
		t.Errorf("a deadlock ended Run (%v); it is retried", err)
	}
}
