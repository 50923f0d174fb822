package checkpoint

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/jackc/pglogrepl"
)

// delivery is one (message, sink) pair waiting for its ack.
type delivery struct {
	txn       *Txn
	commitLSN pglogrepl.LSN // commit record start of the message's transaction (of its replay when abandoned)
}

// TestConfirmedNeverPassesAnUnackedMessage drives random streams (mixed
// transaction sizes, empty transactions, progress points, transactions
// abandoned and sent again, their deliveries of before the Abandon
// counting against the replay's commit) and acks deliveries in random order, checking invariant 1
// after every step and that everything is confirmed at the end.
func TestConfirmedNeverPassesAnUnackedMessage(t *testing.T) {
	for seed := uint64(0); seed < 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 42))
		tr := New(100)
		var inflight []delivery
		lsn := pglogrepl.LSN(1000)
		var lastEnd pglogrepl.LSN = 100

		check := func(step string) {
			if tr.Idle() != tr.idleUnderLock() {
				t.Fatalf("seed %d %s: Idle() = %v, but the queue says %v", seed, step, tr.Idle(), tr.idleUnderLock())
			}
			c := tr.Confirmed()
			for _, d := range inflight {
				if d.commitLSN != 0 && c > d.commitLSN {
					t.Fatalf("seed %d %s: confirmed %s passes commit %s of an unacked message", seed, step, c, d.commitLSN)
				}
			}
		}
		ackSome := func(k int) {
			for i := 0; i < k && len(inflight) > 0; i++ {
				j := rng.IntN(len(inflight))
				d := inflight[j]
				inflight[j] = inflight[len(inflight)-1]
				inflight = inflight[:len(inflight)-1]
				tr.AckAll([]*Txn{d.txn})
				check("ack")
			}
		}
		for step := 0; step < 200; step++ {
			switch r := rng.IntN(10); {
			case r < 6: // a transaction
				txn := tr.Begin()
				n := rng.IntN(5) // 0 = an empty transaction
				if rng.IntN(20) == 0 {
					n = 50
				}
				commit := lsn + pglogrepl.LSN(100*(n+1))
				sinks := 1 + rng.IntN(3)
				abandon := rng.IntN(15) == 0
				for i := 0; i < n; i++ {
					tr.Add(txn, sinks)
					for s := 0; s < sinks; s++ {
						inflight = append(inflight, delivery{txn, commit})
					}
					ackSome(rng.IntN(3))
				}
				if abandon {
					// The stream broke inside it: the server sends it
					// again, and the pipeline hands on only its rows
					// not handed before (a keepalive may come first, at
					// a point before its commit). The deliveries of
					// before hold the replay's commit back.
					tr.Abandon()
					check("abandon")
					if rng.IntN(2) == 0 {
						tr.Progress(lsn + 10)
						check("progress after the abandon")
					}
					txn = tr.Begin()
					for i := rng.IntN(3); i > 0; i-- {
						tr.Add(txn, sinks)
						for s := 0; s < sinks; s++ {
							inflight = append(inflight, delivery{txn, commit})
						}
						ackSome(rng.IntN(3))
					}
				}
				tr.Commit(txn, commit+10)
				lastEnd = commit + 10
				lsn = commit + 20
				check("commit")
			case r < 8:
				ackSome(1 + rng.IntN(10))
			default:
				lsn += 50
				tr.Progress(lsn)
				lastEnd = lsn
				check("progress")
			}
		}
		ackSome(len(inflight))
		if !tr.Idle() || tr.Confirmed() != lastEnd {
			t.Fatalf("seed %d: after all acks confirmed = %s (idle %v), want %s", seed, tr.Confirmed(), tr.Idle(), lastEnd)
		}
	}
}

func TestProgressIsIgnoredInsideATransaction(t *testing.T) {
	tr := New(10)
	txn := tr.Begin()
	tr.Add(txn, 1)
	tr.Progress(500)
	if tr.Confirmed() != 10 {
		t.Fatalf("confirmed %s moved inside an open transaction", tr.Confirmed())
	}
	tr.Commit(txn, 400)
	tr.AckAll([]*Txn{txn})
	if tr.Confirmed() != 400 {
		t.Fatalf("confirmed %s, want 0/190", tr.Confirmed())
	}
}

func TestIdleStreamConfirmsProgress(t *testing.T) {
	tr := New(10)
	tr.Progress(20)
	if tr.Confirmed() != 20 {
		t.Fatalf("confirmed %s, want 0/14", tr.Confirmed())
	}
	tr.Progress(15) // older positions never move it back
	if tr.Confirmed() != 20 {
		t.Fatalf("confirmed went back to %s", tr.Confirmed())
	}
}

// TestQueueIsBoundedByInFlightNotByTransactions: a million empty
// transactions and progress points behind one stuck message keep the
// queue at a handful of entries.
func TestQueueIsBoundedByInFlightNotByTransactions(t *testing.T) {
	tr := New(1)
	stuck := tr.Begin()
	tr.Add(stuck, 1)
	tr.Commit(stuck, 10)
	for i := 0; i < 1_000_000; i++ {
		txn := tr.Begin()
		tr.Commit(txn, pglogrepl.LSN(20+2*i))
		tr.Progress(pglogrepl.LSN(21 + 2*i))
	}
	if n := tr.Len(); n > 2 {
		t.Fatalf("queue holds %d entries", n)
	}
	if tr.Confirmed() != 1 {
		t.Fatalf("confirmed %s past a stuck message", tr.Confirmed())
	}
	tr.AckAll([]*Txn{stuck})
	if want := pglogrepl.LSN(21 + 2*999_999); tr.Confirmed() != want {
		t.Fatalf("confirmed %s, want %s", tr.Confirmed(), want)
	}
}

func TestConcurrentAcks(t *testing.T) {
	tr := New(0)
	const txns, per = 2000, 8
	ch := make(chan *Txn, txns*per)
	for i := 0; i < txns; i++ {
		txn := tr.Begin()
		tr.Add(txn, per)
		for j := 0; j < per; j++ {
			ch <- txn
		}
		tr.Commit(txn, pglogrepl.LSN(i+1))
	}
	close(ch)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for txn := range ch {
				tr.AckAll([]*Txn{txn})
			}
		}()
	}
	wg.Wait()
	if tr.Confirmed() != txns || !tr.Idle() {
		t.Fatalf("confirmed %s idle %v", tr.Confirmed(), tr.Idle())
	}
}

// TestOldestIsTheOldestTransactionWithADeliveryPending: Oldest is nil
// with nothing in flight (an open transaction without deliveries
// included), the first transaction with a pending delivery while it has
// one (the same entry, however many transactions follow), then the next.
func TestOldestIsTheOldestTransactionWithADeliveryPending(t *testing.T) {
	tr := New(10)
	if tr.Oldest() != nil {
		t.Fatal("Oldest of an empty tracker is not nil")
	}
	a := tr.Begin()
	if tr.Oldest() != nil {
		t.Fatal("an open transaction without deliveries counts as in flight")
	}
	tr.Add(a, 2)
	tr.Commit(a, 100)
	b := tr.Begin()
	tr.Add(b, 1)
	tr.Commit(b, 200)
	for range 1000 {
		x := tr.Begin()
		tr.Add(x, 1)
		tr.Commit(x, 300)
		tr.AckAll([]*Txn{x})
	}
	if tr.Oldest() != a {
		t.Fatal("Oldest is not the first transaction with pending deliveries")
	}
	tr.AckAll([]*Txn{a})
	if tr.Oldest() != a {
		t.Fatal("a transaction with one of two deliveries acknowledged left Oldest")
	}
	tr.AckAll([]*Txn{a})
	if tr.Oldest() != b {
		t.Fatal("Oldest did not move on to the next transaction with pending deliveries")
	}
	tr.AckAll([]*Txn{b})
	if tr.Oldest() != nil || tr.Confirmed() != 300 {
		t.Fatalf("everything acknowledged: Oldest %v, confirmed %s", tr.Oldest(), tr.Confirmed())
	}
}

// Settled says when every delivery of a committed transaction was
// acknowledged (the relay waits for it before it closes a gap relayed
// from the table).
func TestSettledOnceEveryDeliveryIsAcked(t *testing.T) {
	tr := New(0)
	txn := tr.Begin()
	tr.Add(txn, 2)
	if tr.Settled(txn) {
		t.Fatal("settled while open")
	}
	tr.Commit(txn, 10)
	tr.AckAll([]*Txn{txn})
	if tr.Settled(txn) {
		t.Fatal("settled with one delivery unacknowledged")
	}
	tr.AckAll([]*Txn{txn})
	if !tr.Settled(txn) {
		t.Fatal("not settled once both deliveries are acknowledged")
	}
}

// TestWaitReturnsOnceTheTransactionIsSettled: a waiter on a transaction
// is woken by its last ack, not before, and one on a settled transaction
// returns at once.
func TestWaitReturnsOnceTheTransactionIsSettled(t *testing.T) {
	tr := New(0)
	txn := tr.Begin()
	tr.Add(txn, 2)
	tr.Commit(txn, 0x100)
	done := make(chan error, 1)
	go func() { done <- tr.Wait(context.Background(), txn) }()
	tr.AckAll([]*Txn{txn})
	select {
	case err := <-done:
		t.Fatalf("Wait returned (%v) with a delivery not acknowledged", err)
	default:
	}
	tr.AckAll([]*Txn{txn})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := tr.Wait(context.Background(), txn); err != nil {
		t.Fatal(err)
	}
	open := tr.Begin()
	tr.Add(open, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tr.Wait(ctx, open); err != context.Canceled {
		t.Fatalf("Wait on an unsettled transaction with a canceled context: %v", err)
	}
}

// TestProgressAtRestOrAfterACompleteEntryTakesNoEntry: a keepalive or
// heartbeat with nothing in flight, or behind a complete entry, costs no
// allocation, and still confirms once what is before it is acknowledged.
func TestProgressAtRestOrAfterACompleteEntryTakesNoEntry(t *testing.T) {
	tr := New(10)
	lsn := pglogrepl.LSN(10)
	if a := testing.AllocsPerRun(100, func() { lsn++; tr.Progress(lsn) }); a != 0 {
		t.Errorf("Progress at rest: %v allocations, want 0", a)
	}
	if tr.Confirmed() != lsn || !tr.Idle() {
		t.Fatalf("confirmed %s (idle %v), want %s", tr.Confirmed(), tr.Idle(), lsn)
	}
	stuck := tr.Begin()
	tr.Add(stuck, 1)
	tr.Commit(stuck, 1000)
	tr.Progress(1001) // an entry of its own behind the stuck one
	if a := testing.AllocsPerRun(100, func() { lsn = 2000; tr.Progress(lsn) }); a != 0 {
		t.Errorf("Progress after a complete entry: %v allocations, want 0", a)
	}
	if tr.Confirmed() != 10+101 {
		t.Fatalf("confirmed %s past an unacknowledged transaction", tr.Confirmed())
	}
	tr.AckAll([]*Txn{stuck})
	if tr.Confirmed() != 2000 || !tr.Idle() {
		t.Fatalf("confirmed %s (idle %v) after the ack, want 0/7D0", tr.Confirmed(), tr.Idle())
	}
}
