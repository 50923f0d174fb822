package sentat

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"
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

// markInMemory stands in for the UPDATE: it records the ids marked.
func markInMemory(m *Marker, marked map[string]bool) {
	for {
		ids, whole, part := m.nextBatch(m.src.Confirmed())
		if len(ids) == 0 {
			return
		}
		if len(ids) > maxBatch {
			panic(fmt.Sprintf("a statement of %d ids", len(ids)))
		}
		for _, id := range ids {
			marked[id] = true
		}
		m.mu.Lock()
		clear(m.queue[:whole])
		m.queue = m.queue[whole:]
		if part > 0 {
			m.queue[0].ids = m.queue[0].ids[part:]
		}
		m.pending -= len(ids)
		m.mu.Unlock()
	}
}

// TestConfirmedNeverPassesAnUnmarkedTransaction: whatever the order of
// commits, tracker confirmations, marking rounds and reads, the position
// the stream may confirm never passes a transaction with an unmarked row
// and never decreases (docs/design.md, invariant 10). Transactions larger
// than one statement are marked in several.
func TestConfirmedNeverPassesAnUnmarkedTransaction(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		tr := &fakeTracker{}
		m := New("", "", tr, zerolog.Nop())
		type txn struct {
			end pglogrepl.LSN
			ids []string
		}
		var txns []txn
		marked := map[string]bool{}
		lsn, last := pglogrepl.LSN(100), pglogrepl.LSN(0)
		for step := range 400 {
			switch r.IntN(4) {
			case 0:
				lsn += pglogrepl.LSN(1 + r.IntN(50))
				n := 1 + r.IntN(3)
				if r.IntN(20) == 0 {
					n = maxBatch + r.IntN(2*maxBatch) // more than one statement
				}
				ids := make([]string, n)
				for i := range ids {
					ids[i] = fmt.Sprintf("%d-%d", step, i)
				}
				if err := m.Add(context.Background(), lsn, ids); err != nil {
					t.Fatal(err)
				}
				txns = append(txns, txn{lsn, ids})
			case 1:
				if len(txns) > 0 {
					tr.set(txns[r.IntN(len(txns))].end)
				}
			case 2:
				markInMemory(m, marked)
			case 3:
				got := m.Confirmed()
				if got < last {
					t.Fatalf("seed %d: Confirmed went back from %s to %s", seed, last, got)
				}
				last = got
				for _, x := range txns {
					if x.end > got {
						continue
					}
					// Rows are marked in order: checking the last suffices
					// once the first was seen marked.
					for _, id := range []string{x.ids[0], x.ids[len(x.ids)-1]} {
						if !marked[id] {
							t.Fatalf("seed %d: Confirmed %s passes transaction %s, whose row %s is not marked", seed, got, x.end, id)
						}
					}
				}
			}
		}
	}
}

// TestAddWaitsWhileTooManyIdsWaitToBeMarked: past maxPending ids Add
// waits until a round marked some (or its context ends), so a failing
// UPDATE bounds memory instead of queueing every id.
func TestAddWaitsWhileTooManyIdsWaitToBeMarked(t *testing.T) {
	tr := &fakeTracker{}
	m := New("", "", tr, zerolog.Nop())
	big := make([]string, maxPending)
	for i := range big {
		big[i] = fmt.Sprint(i)
	}
	if err := m.Add(context.Background(), 10, big); err != nil { // alone: accepted
		t.Fatal(err)
	}
	if !m.Full(1) {
		t.Fatal("Full(1) is false with maxPending ids waiting")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := m.Add(ctx, 20, []string{"x"}); err != context.DeadlineExceeded {
		t.Fatalf("Add past maxPending returned %v, want to wait until its context ended", err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Add(context.Background(), 20, []string{"x"}) }()
	tr.set(10)
	markInMemory(m, map[string]bool{})
	notify(m.space)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Add still waits after the marking caught up")
	}
}
