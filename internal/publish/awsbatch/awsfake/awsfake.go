// Package awsfake is the plumbing the SQS and SNS stand-ins (sqsfake,
// snsfake) share: a loopback HTTP listener that Stop and Start take down
// and up on the same port (Listener), the faults the tests inject
// (Faults: throttled answers, failed batch entries, request counts), and
// a FIFO destination's deduplication window (Dedup). Each stand-in keeps
// its own protocol and state.
//
// Listener and Faults are safe for concurrent use; a Dedup is guarded by
// its owner.
package awsfake

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// DedupWindow is how long a FIFO queue or topic remembers a
// deduplication id.
const DedupWindow = 5 * time.Minute

// Listener serves a handler on a loopback port, which Stop and Start
// keep. The zero value is ready for Listen.
type Listener struct {
	// OnStop, if set, is called after Stop closed the server (sqsfake
	// wakes its long polls with it).
	OnStop func()

	mu      sync.Mutex
	addr    string
	handler http.Handler
	srv     *http.Server
}

// Listen starts serving h on addr ("127.0.0.1:0" picks a port).
func (l *Listener) Listen(addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.addr, l.handler = ln.Addr().String(), h
	l.mu.Unlock()
	l.serve(ln)
	return nil
}

func (l *Listener) serve(ln net.Listener) {
	l.mu.Lock()
	srv := &http.Server{Handler: l.handler, ReadHeaderTimeout: 10 * time.Second}
	l.srv = srv
	l.mu.Unlock()
	go srv.Serve(ln)
}

// Addr is the host:port served.
func (l *Listener) Addr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addr
}

// URL is the endpoint to give the SDK (endpoint: in a sink's config).
func (l *Listener) URL() string { return "http://" + l.Addr() }

// Stop closes the listener and every connection, as a server that died
// would; the stand-in's state is kept.
func (l *Listener) Stop() {
	l.mu.Lock()
	srv := l.srv
	l.srv = nil
	l.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
	if l.OnStop != nil {
		l.OnStop()
	}
}

// Start listens again on the port of the first Listen.
func (l *Listener) Start() error {
	addr := l.Addr()
	var ln net.Listener
	var err error
	for range 50 { // the port may linger for a moment
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	l.serve(ln)
	return nil
}

// Close stops serving for good.
func (l *Listener) Close() { l.Stop() }

// Outage stops the stand-in until the returned function starts it again
// (sinktest.Target.Outage).
func (l *Listener) Outage(t interface {
	Helper()
	Fatal(...any)
}) (restore func()) {
	l.Stop()
	return func() {
		if err := l.Start(); err != nil {
			t.Fatal(err)
		}
	}
}

// Faults are the faults a test injects into a stand-in, and its request
// counts. The zero value injects none.
type Faults struct {
	mu       sync.Mutex
	throttle int
	fail     func(dest, body string) (code string, senderFault bool)
	requests map[string]int
}

// Throttle answers the next n requests with the service's throttling
// error.
func (f *Faults) Throttle(n int) {
	f.mu.Lock()
	f.throttle = n
	f.mu.Unlock()
}

// FailEntries makes every batch entry (or single send) for which fn
// returns a code fail with that code (and SenderFault); nil turns it off.
// fn gets the queue's or topic's name and the entry's body.
func (f *Faults) FailEntries(fn func(dest, body string) (code string, senderFault bool)) {
	f.mu.Lock()
	f.fail = fn
	f.mu.Unlock()
}

// Requests returns how many requests of operation op were answered,
// throttled ones included.
func (f *Faults) Requests(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[op]
}

// Request counts a request of op and reports whether to answer it as
// throttled.
func (f *Faults) Request(op string) (throttled bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.requests == nil {
		f.requests = map[string]int{}
	}
	f.requests[op]++
	if f.throttle > 0 {
		f.throttle--
		return true
	}
	return false
}

// Fail returns the code FailEntries's function gives an entry of body to
// dest, "" for none.
func (f *Faults) Fail(dest, body string) (code string, senderFault bool) {
	f.mu.Lock()
	fn := f.fail
	f.mu.Unlock()
	if fn == nil {
		return "", false
	}
	return fn(dest, body)
}

// Dedup is a FIFO destination's deduplication window: the ids seen in the
// last DedupWindow, with the id of the message each stored. The zero
// value is empty.
type Dedup struct {
	seen  map[string]seenID
	order []string // ids in the order remembered, for expiry
}

type seenID struct {
	msgID string
	at    time.Time
}

// Seen forgets the ids older than DedupWindow at now and reports whether
// id is remembered, with the id of the message it stored.
func (d *Dedup) Seen(id string, now time.Time) (msgID string, dup bool) {
	for len(d.order) > 0 && now.Sub(d.seen[d.order[0]].at) > DedupWindow {
		delete(d.seen, d.order[0])
		d.order = d.order[1:]
	}
	s, dup := d.seen[id]
	return s.msgID, dup
}

// Remember remembers id, which stored message msgID at now.
func (d *Dedup) Remember(id, msgID string, now time.Time) {
	if d.seen == nil {
		d.seen = map[string]seenID{}
	}
	d.seen[id] = seenID{msgID: msgID, at: now}
	d.order = append(d.order, id)
}
