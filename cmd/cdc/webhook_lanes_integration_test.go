package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// laneEndpoint is a webhook receiver that takes 20 ms per request and
// records, per ordering key, the position (in the key's WAL order) of
// every message it took, in the order it took them. It answers 503 to
// the first attempt of every 40th message (a failure the relay retries),
// and counts the requests in flight at once, overall and per key.
type laneEndpoint struct {
	latency time.Duration

	mu        sync.Mutex
	all       []relaytest.Msg   // every message, in insert (WAL) order
	pos       map[string]msgPos // id → its key and position
	keys      map[string]int    // key → messages inserted
	types     map[string]string // id → type as inserted
	taken     map[string][]int  // key → positions, in the order taken
	times     map[string]int    // id → how often taken
	gotType   map[string]string // id → X-Message-Type as taken
	refused   map[string]bool   // ids answered 503 once
	strangers []string          // ids never inserted, or with another key
	inFlight  int
	maxIn     int             // most requests at once
	busy      map[string]bool // keys with a request at the endpoint
	overlaps  int             // requests that came while their key had one in flight
}

type msgPos struct {
	key    string
	at     int // position among the key's messages
	global int // position among all messages
}

func newLaneEndpoint(latency time.Duration) *laneEndpoint {
	return &laneEndpoint{latency: latency, pos: map[string]msgPos{}, taken: map[string][]int{}, times: map[string]int{},
		refused: map[string]bool{}, busy: map[string]bool{}, gotType: map[string]string{}, types: map[string]string{}, keys: map[string]int{}}
}

// expect registers msgs, in WAL order, before they are inserted.
func (e *laneEndpoint) expect(msgs []relaytest.Msg) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range msgs {
		e.pos[m.ID] = msgPos{key: m.Key, at: e.keys[m.Key], global: len(e.all)}
		e.types[m.ID] = m.Type
		e.keys[m.Key]++
		e.all = append(e.all, m)
	}
}

func (e *laneEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, err := io.ReadAll(r.Body); err != nil {
		return
	}
	id, key := r.Header.Get("X-Message-Id"), r.Header.Get("X-Message-Key")
	e.mu.Lock()
	p, known := e.pos[id]
	if !known || p.key != key {
		e.strangers = append(e.strangers, id)
	}
	e.inFlight++
	e.maxIn = max(e.maxIn, e.inFlight)
	if e.busy[key] {
		e.overlaps++
	}
	e.busy[key] = true
	fail := known && p.global%40 == 0 && !e.refused[id]
	if fail {
		e.refused[id] = true
	} else if known {
		e.taken[key] = append(e.taken[key], p.at)
		e.times[id]++
		e.gotType[id] = r.Header.Get("X-Message-Type")
	}
	e.mu.Unlock()
	time.Sleep(e.latency)
	e.mu.Lock()
	e.inFlight--
	delete(e.busy, key)
	e.mu.Unlock()
	if fail {
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// delivered is how many distinct messages the endpoint took.
func (e *laneEndpoint) delivered() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.times)
}

// checkKeyOrder checks the order guarantee of an at-least-once relay
// with lanes, per ordering key, on the positions the endpoint took them
// in (0 for the key's first message in the WAL):
//
//  1. no message is taken before every earlier message of its key was
//     taken at least once: each position is at most one past the highest
//     taken before it (so the first deliveries come in WAL order, without
//     gaps);
//  2. a step forward is a step of one: after a step back (a resend: after
//     a restart the relay sends again from its confirmed position, after
//     a request without an answer that request again) the key's messages
//     come again in WAL order, each once, until they reach new ones.
//
// A duplicate may thus come after a later message of its key was first
// delivered (the relay was killed after the endpoint took messages 3..5
// of a key but before it confirmed them: it resends 3, 4, 5, then 6),
// never out of order within its run.
func (e *laneEndpoint) checkKeyOrder(t *testing.T) (dups int) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for key, ps := range e.taken {
		high, prev := -1, -1
		for i, p := range ps {
			switch {
			case p > high+1:
				t.Errorf("key %s: arrival %d is its message %d, but only up to %d had been taken: a message overtook an earlier one of its key (arrivals %v)",
					key, i, p, high, ps[max(0, i-5):min(len(ps), i+5)])
			case p > prev && p != prev+1:
				t.Errorf("key %s: arrival %d is its message %d right after %d: a resend skipped messages (arrivals %v)",
					key, i, p, prev, ps[max(0, i-5):min(len(ps), i+5)])
			}
			if p <= high {
				dups++
			}
			high, prev = max(high, p), p
		}
	}
	for id := range e.times {
		if e.gotType[id] != e.types[id] {
			t.Errorf("message %s arrived with X-Message-Type %q, inserted as %q", id, e.gotType[id], e.types[id])
		}
	}
	return dups
}

// TestIntegrationWebhookLanesKeepKeyOrderThroughKill9: the cdc binary
// relays 2,000 rows over 50 interleaved keys to a webhook endpoint that
// takes 20 ms per request and fails some requests once (503), with
// concurrency: 32. The relay is killed with SIGKILL mid-way and started
// again: every row reaches the endpoint, at most 32 and more than one
// request were in flight at once, never two of one key, and each key's
// messages arrive in the order checkKeyOrder states (first deliveries in
// WAL order, resends replaying in order).
func TestIntegrationWebhookLanesKeepKeyOrderThroughKill9(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	e := newLaneEndpoint(20 * time.Millisecond)
	srv := httptest.NewServer(e)
	defer srv.Close()
	cfg := ob.Config(t, fmt.Sprintf("  - {name: hook, kind: webhook, url: %q, concurrency: 32, timeout: 5s}", srv.URL+"/hook"), "")
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)

	const rows, keys, txRows = 2000, 50, 50
	rnd := rand.New(rand.NewPCG(26, 2))
	msgs := make([]relaytest.Msg, rows)
	for i := range msgs {
		msgs[i] = relaytest.NewMsg([]string{"order.created", "order.paid", "order.shipped"}[i%3], fmt.Sprintf("order-%02d", rnd.IntN(keys)), i)
	}
	e.expect(msgs)
	insert := func(part []relaytest.Msg) {
		for len(part) > 0 {
			n := min(txRows, len(part))
			ob.InsertTx(t, conn, part[:n]...)
			part = part[n:]
		}
	}
	insert(msgs[:rows/2])

	relay := startCDC(t, "run", "--config", cfg)
	inserted := make(chan struct{})
	go func() {
		defer close(inserted)
		c := pgtest.Connect(t, url)
		for part := msgs[rows/2:]; len(part) > 0; {
			n := min(txRows, len(part))
			ob.InsertTx(t, c, part[:n]...)
			part = part[n:]
		}
	}()
	if !pgtest.WaitFor(60*time.Second, func() bool { return e.delivered() >= 700 }) {
		t.Fatalf("%d messages delivered in 60 s\n%s", e.delivered(), relay.Stderr.String())
	}
	relay.Kill9(t)
	killedAt := e.delivered()
	<-inserted

	relay = startCDC(t, "run", "--config", cfg)
	if !pgtest.WaitFor(90*time.Second, func() bool { return e.delivered() == rows }) {
		t.Fatalf("%d of %d messages delivered after the restart\n%s", e.delivered(), rows, relay.Stderr.String())
	}
	relay.Stop(t)

	dups := e.checkKeyOrder(t)
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.strangers) > 0 {
		t.Errorf("%d requests for messages never inserted or with another key, first %q", len(e.strangers), e.strangers[0])
	}
	if e.maxIn < 2 || e.maxIn > 32 {
		t.Errorf("at most %d requests at the endpoint at once, want 2..32", e.maxIn)
	}
	if e.overlaps > 0 {
		t.Errorf("%d requests came while another of their key was at the endpoint", e.overlaps)
	}
	if len(e.refused) == 0 {
		t.Errorf("no request was answered 503: the test did not exercise a failed request")
	}
	t.Logf("killed with %d of %d delivered; %d requests answered 503 once; %d duplicates; at most %d requests at once",
		killedAt, rows, len(e.refused), dups, e.maxIn)
}
