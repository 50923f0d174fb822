package fleet

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// poll is one answer of a fake server to slotWatch's query: the slots it
// was asked about come in on asked, the answer goes out on held/err.
type fakePolls struct {
	asked chan []string
	reply chan fakeReply
}

type fakeReply struct {
	held map[string]bool
	err  error
}

func (f *fakePolls) now(ctx context.Context, conn **pgx.Conn, url string, slots []string) (map[string]bool, error) {
	slices.Sort(slots)
	f.asked <- slots
	r := <-f.reply
	return r.held, r.err
}

// TestSlotWatchAsksOnceForEverySlotAndWakesOnlyTheFreedOnes: the standbys
// of one server are asked about in one query; a slot still held keeps its
// waiters, a freed one (or one gone) wakes them, a failed query wakes all
// (they try their slots and meet the error themselves).
func TestSlotWatchAsksOnceForEverySlotAndWakesOnlyTheFreedOnes(t *testing.T) {
	f := &fakePolls{asked: make(chan []string), reply: make(chan fakeReply)}
	w := &slotWatch{by: map[string]*slotPoller{}, now: f.now}
	done := map[string]chan struct{}{}
	for _, s := range []string{"a", "b", "c"} {
		done[s] = make(chan struct{})
		go func() { w.wait(context.Background(), "url", s, time.Millisecond); close(done[s]) }()
	}
	woken := func(s string) bool {
		select {
		case <-done[s]:
			return true
		default:
			return false
		}
	}
	// Until all three registered, the poll may ask about fewer.
	for {
		got := <-f.asked
		if len(got) == 3 {
			break
		}
		f.reply <- fakeReply{held: map[string]bool{"a": true, "b": true, "c": true}}
	}
	f.reply <- fakeReply{held: map[string]bool{"a": true, "c": true}} // b freed
	<-done["b"]
	if got := <-f.asked; !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("asked about %v after b was freed, want [a c]", got)
	}
	if woken("a") || woken("c") {
		t.Fatal("a standby of a held slot was woken")
	}
	f.reply <- fakeReply{err: errors.New("connection refused")}
	<-done["a"]
	<-done["c"]
}

// TestSlotWatchForgetsAWaiterWhoseContextEnded: the poll stops asking
// about a slot nobody waits for, and ends when nobody waits.
func TestSlotWatchForgetsAWaiterWhoseContextEnded(t *testing.T) {
	f := &fakePolls{asked: make(chan []string), reply: make(chan fakeReply)}
	w := &slotWatch{by: map[string]*slotPoller{}, now: f.now}
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() { w.wait(ctx, "url", "a", time.Millisecond); close(returned) }()
	<-f.asked
	cancel()
	<-returned
	f.reply <- fakeReply{held: map[string]bool{"a": true}}
	for {
		w.mu.Lock()
		n := len(w.by)
		w.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-f.asked:
			t.Fatal("the poll asked again with nobody waiting")
		case <-time.After(time.Millisecond):
		}
	}
}
