package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/checkpoint"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/store"
)

// harness runs a Pipeline on an unbuffered events channel, so that a send
// returns once Run took the batch, and a second send once it handled the
// first (sync). Each sink has a Settler on a fake progress store.
type harness struct {
	t        *testing.T
	p        *Pipeline
	tracker  *checkpoint.Tracker
	window   *Window
	dead     *fakeDead
	progress *fakeProgress
	metrics  testMetrics
	settlers []*Settler
	sinkM    []testSinkMetrics
	events   chan []replication.Event
	done     chan error
	// closedEvents: stop closed events.
	closedEvents bool
	ctx          context.Context
}

type testMetrics struct {
	decoded, deadLettered, forgedEnvelopes, forgedAdopts, foreign *tally
}

type testSinkMetrics struct {
	published, refused *tally
	latency            *tally
}

// start runs a pipeline with o's settings over defaults: an outbox
// decoder, a tracker from 0, a window of 1,000 deliveries and a fake
// dead-letter store (o's fields that are set win).
func start(t *testing.T, o Options) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	h := &harness{t: t, dead: &fakeDead{parked: map[string]bool{}}, progress: &fakeProgress{at: map[string]store.Position{}},
		events: make(chan []replication.Event), done: make(chan error, 1), ctx: ctx}
	if o.Decoder == nil {
		o.Decoder = decoder.New(decoder.Mapping{Schema: "public", Name: "outbox", Columns: layout.Default})
	}
	if o.Tracker == nil {
		o.Tracker = checkpoint.New(0)
	}
	if o.Window == nil {
		o.Window = NewWindow(1000, 1<<30)
	}
	if o.DeadLetters == nil {
		o.DeadLetters = h.dead
	}
	if o.Routes == nil {
		o.Routes = []config.Route{{}}
	}
	h.metrics = testMetrics{&tally{}, &tally{}, &tally{}, &tally{}, &tally{}}
	o.Metrics = Metrics{Decoded: h.metrics.decoded, DeadLettered: h.metrics.deadLettered, ForgedEnvelopes: h.metrics.forgedEnvelopes,
		ForgedAdopts: h.metrics.forgedAdopts, ForeignRelations: h.metrics.foreign}
	o.Log = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	h.tracker, h.window = o.Tracker, o.Window
	h.p = New(o)
	for i := range o.Routes {
		m := testSinkMetrics{&tally{}, &tally{}, &tally{}}
		h.sinkM = append(h.sinkM, m)
		h.settlers = append(h.settlers, NewSettler(SettlerOptions{Sink: sinkName(i), Tracker: o.Tracker, Window: o.Window,
			Progress: h.progress, Metrics: SinkMetrics{Published: m.published, Latency: m.latency, Refused: m.refused}, Log: o.Log}))
	}
	go func() { h.done <- h.p.Run(ctx, h.events) }()
	t.Cleanup(func() {
		cancel() // Run waits on ctx only where it hands on or waits for room
		if !h.closedEvents {
			close(h.events)
		}
		<-h.done
	})
	return h
}

func sinkName(i int) string { return fmt.Sprintf("sink%d", i) }

// send hands Run one batch and waits until it handled it.
func (h *harness) send(b []replication.Event) {
	h.t.Helper()
	h.give(b)
	h.sync()
}

// give hands Run one batch: it returns once Run took it.
func (h *harness) give(b []replication.Event) {
	h.t.Helper()
	select {
	case h.events <- b:
	case err := <-h.done:
		h.done <- err // for the cleanup
		h.t.Fatalf("Run returned %v before taking the batch", err)
	case <-h.ctx.Done():
		h.t.Fatal("Run did not take the batch within 10s")
	}
}

// sync returns once Run handled every batch given before.
func (h *harness) sync() { h.t.Helper(); h.give(nil) }

// stop closes the events and returns Run's error.
func (h *harness) stop() error {
	h.t.Helper()
	close(h.events)
	h.closedEvents = true
	return h.wait()
}

// wait returns Run's error.
func (h *harness) wait() error {
	h.t.Helper()
	select {
	case err := <-h.done:
		h.done <- err // for the cleanup
		return err
	case <-h.ctx.Done():
		h.t.Fatal("Run did not return within 10s")
		return nil
	}
}

// recv returns the next delivery slice of sink i.
func (h *harness) recv(i int) []publish.Delivery {
	h.t.Helper()
	select {
	case ds, ok := <-h.p.Out(i):
		if !ok {
			h.t.Fatalf("%s: channel closed, want deliveries", sinkName(i))
		}
		return ds
	case <-h.ctx.Done():
		h.t.Fatalf("%s: no deliveries within 10s", sinkName(i))
		return nil
	}
}

// nothing checks that sink i has no delivery waiting (call it after a
// sync: Run hands on what it gathered before it takes the next batch).
func (h *harness) nothing(i int) {
	h.t.Helper()
	select {
	case ds, ok := <-h.p.Out(i):
		if ok {
			h.t.Fatalf("%s got %v, want nothing", sinkName(i), ids(ds))
		}
	default:
	}
}

// closed checks that sink i's channel is closed with nothing left in it.
func (h *harness) closed(i int) {
	h.t.Helper()
	if ds, ok := <-h.p.Out(i); ok {
		h.t.Fatalf("%s got %v, want its channel closed", sinkName(i), ids(ds))
	}
}

// ack settles ds as sink i's runner does once the sink made them durable.
func (h *harness) ack(i int, ds []publish.Delivery) { h.settlers[i].Ack(ds) }

// inFlight is the window's count of deliveries.
func (h *harness) inFlight() int {
	n, _ := h.window.InFlight()
	return n
}

// confirmed is the tracker's confirmed position.
func (h *harness) confirmed() pglogrepl.LSN { return h.tracker.Confirmed() }

// ids names deliveries by their test number (uuid(n) → "n").
func ids(ds []publish.Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, idNum(d.Msg.ID))
	}
	return out
}

func idNum(id string) string {
	var n int
	if _, err := fmt.Sscanf(id, "00000000-0000-4000-8000-%012d", &n); err != nil {
		return id
	}
	return fmt.Sprint(n)
}

func want(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

// tally is a Counter and an Observer: it counts, and sums what it is
// added or observed.
type tally struct {
	mu  sync.Mutex
	n   int
	sum float64
}

func (c *tally) Inc()              { c.Add(1) }
func (c *tally) Add(v float64)     { c.mu.Lock(); c.n++; c.sum += v; c.mu.Unlock() }
func (c *tally) Observe(v float64) { c.Add(v) }
func (c *tally) total() float64    { c.mu.Lock(); defer c.mu.Unlock(); return c.sum }
func (c *tally) count() int        { c.mu.Lock(); defer c.mu.Unlock(); return c.n }

// fakeDead is a dead-letter table in memory.
type fakeDead struct {
	mu       sync.Mutex
	parks    []*decoder.Error
	parked   map[string]bool // at (store.FormatAt) → parked by cdc skip
	lookups  []string
	parkErr  error
	lookErr  error
	refused  []string // sink/id
	refusErr error
}

func (f *fakeDead) Park(ctx context.Context, e *decoder.Error, errText string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.parkErr != nil {
		return f.parkErr
	}
	f.parks = append(f.parks, e)
	return nil
}

func (f *fakeDead) Parked(ctx context.Context, lsn pglogrepl.LSN, seq uint32) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	at := store.FormatAt(lsn, seq)
	f.lookups = append(f.lookups, at)
	return f.parked[at], f.lookErr
}

func (f *fakeDead) ParkRefused(ctx context.Context, sink string, m *message.Message, cause error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refusErr != nil {
		return f.refusErr
	}
	f.refused = append(f.refused, sink+"/"+idNum(m.ID))
	return nil
}

// parkedAt lists the positions of the rows parked.
func (f *fakeDead) parkedAt() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var at []string
	for _, e := range f.parks {
		at = append(at, store.FormatAt(e.LSN, e.Seq))
	}
	return at
}

// fakeProgress is the progress store in memory.
type fakeProgress struct {
	mu sync.Mutex
	at map[string]store.Position
}

func (f *fakeProgress) Acked(sink string, p store.Position) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if old, ok := f.at[sink]; ok && (old.CommitLSN > p.CommitLSN || old.CommitLSN == p.CommitLSN && old.LSN > p.LSN) {
		panic(fmt.Sprintf("progress of %s moved back from %v to %v", sink, old, p))
	}
	f.at[sink] = p
}

func (f *fakeProgress) of(sink string) store.Position {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at[sink]
}

// fakeMarker records what Add is handed, and what the tracker and the
// sinks' channels held at that moment.
type fakeMarker struct {
	h    *harness
	full bool
	err  error
	adds []markerAdd
}

type markerAdd struct {
	end       pglogrepl.LSN
	xid       uint32
	ids       []string
	confirmed pglogrepl.LSN // the tracker's, when Add was called
	queued    int           // delivery slices in sink 0's channel then
}

func (m *fakeMarker) Full(n int) bool { return m.full }

func (m *fakeMarker) Add(ctx context.Context, end pglogrepl.LSN, xid uint32, ids []string) error {
	if m.err != nil {
		return m.err
	}
	var nums []string
	for _, id := range ids {
		nums = append(nums, idNum(id))
	}
	m.adds = append(m.adds, markerAdd{end: end, xid: xid, ids: nums, confirmed: m.h.tracker.Confirmed(), queued: len(m.h.p.Out(0))})
	return nil
}

var errBroken = errors.New("broken")
