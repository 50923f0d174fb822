package fleet

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/backoff"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/relay"
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

// TestAStandbyWaitingForItsSlotIsShownAsStandby: a source whose stream
// waits for its slot on the slot watch (WaitFree) tried it once, long
// ago, and is still a standby, not back at its check.
func TestAStandbyWaitingForItsSlotIsShownAsStandby(t *testing.T) {
	cfg, err := config.Parse([]byte("postgres: {url: 'postgres://127.0.0.1:1/x', table: public.outbox}\nsinks:\n  - {name: out, kind: discard}\n"),
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(cfg, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	e := &entry{g: NewGate(0, 1), poll: time.Second, log: zerolog.Nop(), sleep: backoff.Sleep,
		waitingG: prometheus.NewGauge(prometheus.GaugeOpts{Name: "w"}), unownedG: prometheus.NewGauge(prometheus.GaugeOpts{Name: "u"}),
		free: func(ctx context.Context, _ time.Duration) { <-release }}
	s := &source{Source: Source{Name: "s", Config: cfg}, entry: e, relay: r}
	if err := e.Enter(t.Context()); err != nil { // the attempt that found the slot held
		t.Fatal(err)
	}
	e.Leave()
	waited := make(chan struct{})
	go func() { e.WaitFree(t.Context(), e.poll); close(waited) }()
	for !e.snapshot().standby {
		time.Sleep(time.Millisecond)
	}
	if st := s.status(time.Now().Add(time.Hour)); st.State != StateStandby {
		t.Fatalf("state %s an hour after the last attempt, waiting for the slot: want %s", st.State, StateStandby)
	}
	close(release)
	<-waited
	if st := s.status(time.Now().Add(time.Hour)); st.State == StateStandby {
		t.Fatal("still a standby an hour after it stopped waiting and made no attempt")
	}
}
