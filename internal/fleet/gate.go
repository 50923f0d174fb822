package fleet

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/backoff"
)

// Gate is one instance's capacity: at most Max of its sources hold, or
// are trying to take, their slots at once (--max-active; 0: no limit).
// Each source enters it through its own entry, the replication.Gate of
// its relay's streams: before each attempt to take the slot, given back
// after an attempt that did not get it (the slot is held elsewhere: a
// standby holds no capacity while it waits) and when it lets the slot go.
// A source that finds the Gate full waits without trying its slot. Safe
// for concurrent use.
type Gate struct {
	max     int
	sem     chan struct{} // one token per place; nil without a limit
	used    atomic.Int64  // places taken
	sources int           // sources sharing the Gate (the spread without a limit)
	// probeEvery is how often a source waiting for capacity looks whether
	// any process holds its slot (after a first look one standby_poll in).
	probeEvery time.Duration
}

// probeEvery is Gate.probeEvery's default.
const probeEvery = 5 * time.Second

// NewGate returns the capacity of an instance of sources sources that
// holds at most maxActive slots at once (0: no limit).
func NewGate(maxActive, sources int) *Gate {
	g := &Gate{max: maxActive, sources: max(sources, 1), probeEvery: probeEvery}
	if maxActive > 0 {
		g.sem = make(chan struct{}, maxActive)
	}
	return g
}

// Max is the capacity (0: no limit).
func (g *Gate) Max() int { return g.max }

// Used is how many places are taken: slots held, and attempts to take one
// under way.
func (g *Gate) Used() int { return int(g.used.Load()) }

// capacity is what the spread measures use against: the limit, or the
// number of sources without one.
func (g *Gate) capacity() int {
	if g.max > 0 {
		return g.max
	}
	return g.sources
}

// spread is how long an attempt to take a slot waits first on an instance
// that uses some of its capacity: poll/2 × used/capacity, so that of the
// instances polling a slot that became free, the one with fewer active
// sources tends to win it (docs/fleet.md, "Spread").
func (g *Gate) spread(poll time.Duration) time.Duration {
	used, c := g.used.Load(), int64(g.capacity())
	if used <= 0 {
		return 0
	}
	return time.Duration(int64(poll/2) * min(used, c) / c)
}

// take takes a place without waiting; false when the Gate is full.
func (g *Gate) take() bool {
	if g.sem != nil {
		select {
		case g.sem <- struct{}{}:
		default:
			return false
		}
	}
	g.used.Add(1)
	return true
}

// give gives a place back.
func (g *Gate) give() {
	g.used.Add(-1)
	if g.sem != nil {
		<-g.sem
	}
}

// entry is one source's way through the Gate: the replication.Gate of its
// relay. Enter and Leave are called by one stream at a time; the state
// read by snapshot is guarded by mu.
type entry struct {
	g    *Gate
	poll time.Duration // the source's postgres.standby_poll
	log  zerolog.Logger
	// probe reports whether the source's slot exists and no process
	// holds it (it waits for capacity, unowned).
	probe func(ctx context.Context) (unowned bool, err error)
	sleep func(ctx context.Context, d time.Duration) bool
	// free waits until the source's slot looks free (slotWatch.wait);
	// nil: the stream polls the slot itself.
	free func(ctx context.Context, poll time.Duration)

	waitingG, unownedG prometheus.Gauge

	mu         sync.Mutex
	held       bool      // a place is taken (an attempt, or the slot held)
	heldSince  time.Time // when it was taken
	waiting    bool      // in Enter, the Gate full
	unowned    bool      // the last probe found the slot held by no process
	attempts   int       // Enter calls since reset
	reached    bool      // Enter was ever called: the source got past its check
	lastEnter  time.Time
	standby    bool // in WaitFree: a standby waiting for its slot
	waitLogged bool // this wait for capacity was logged
}

// holdLong is how long a place must be held for the next wait for
// capacity to be logged again: the source had its slot, not one attempt.
const holdLong = 5 * time.Second

// Enter implements replication.Gate: it waits for the spread, then for a
// place, looking meanwhile whether any process holds the slot.
func (e *entry) Enter(ctx context.Context) error {
	e.mu.Lock()
	e.attempts++
	e.reached = true
	e.lastEnter = time.Now()
	if e.held {
		// A stream of this source did not give its place back (a bug):
		// one source never takes two.
		e.mu.Unlock()
		e.log.Error().Msg("fleet: capacity taken again by a source that holds it; kept")
		return nil
	}
	e.mu.Unlock()
	if d := e.g.spread(e.poll); d > 0 && !e.sleep(ctx, d) {
		return ctx.Err()
	}
	if e.g.take() {
		e.took()
		return nil
	}
	e.setWaiting(true)
	defer e.setWaiting(false)
	look := time.NewTimer(e.poll)
	defer look.Stop()
	for {
		select {
		case e.g.sem <- struct{}{}:
			e.g.used.Add(1)
			e.took()
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-look.C:
			e.look(ctx)
			look.Reset(e.g.probeEvery)
		}
	}
}

// WaitFree implements replication.SlotWaiter: a standby waits for its
// slot on the instance's slotWatch, holding nothing of the Gate.
func (e *entry) WaitFree(ctx context.Context, poll time.Duration) {
	if e.free == nil {
		e.sleep(ctx, backoff.Between(poll-poll/4, poll+poll/4))
		return
	}
	e.mu.Lock()
	e.standby = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.standby, e.lastEnter = false, time.Now()
		e.mu.Unlock()
	}()
	e.free(ctx, poll)
}

// Leave implements replication.Gate.
func (e *entry) Leave() {
	e.mu.Lock()
	if !e.held {
		e.mu.Unlock()
		e.log.Error().Msg("fleet: capacity given back twice") // a bug; not given twice
		return
	}
	e.held = false
	if time.Since(e.heldSince) > holdLong {
		e.waitLogged = false
	}
	e.mu.Unlock()
	e.g.give()
}

func (e *entry) took() {
	e.mu.Lock()
	e.held, e.heldSince = true, time.Now()
	e.mu.Unlock()
}

// setWaiting marks the source waiting for capacity, or no longer.
func (e *entry) setWaiting(w bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.waiting = w
	e.waitingG.Set(b2f(w))
	if !w && e.unowned {
		e.unowned = false
		e.unownedG.Set(0)
		e.log.Info().Msg("capacity is free again: trying the slot that no process held")
	}
}

// look runs the probe while the source waits for capacity: a slot that
// exists and that no process holds is relayed by nobody (the fleet lacks
// capacity), which is logged and counted (walpost_source_unowned).
func (e *entry) look(ctx context.Context) {
	e.mu.Lock()
	if !e.waitLogged {
		e.waitLogged = true
		e.log.Info().Int("max_active", e.g.max).
			Msg("this instance holds --max-active slots: the source waits for capacity without trying its slot (another instance may hold it)")
	}
	e.mu.Unlock()
	unowned, err := e.probe(ctx)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Debug().Err(err).Msg("could not look whether another process holds the slot")
		}
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case unowned && !e.unowned:
		e.log.Warn().Int("max_active", e.g.max).
			Msg("no process holds the slot and this instance is at --max-active: nothing relays this source; the fleet lacks capacity (docs/fleet.md, sizing: (instances-1) x max_active >= sources)")
	case !unowned && e.unowned:
		e.log.Info().Msg("the slot is held again by another process")
	}
	e.unowned = unowned
	e.unownedG.Set(b2f(unowned))
}

// entryState is a snapshot of an entry.
type entryState struct {
	held, waiting, unowned, reached bool
	standby                         bool // waiting for its slot (WaitFree)
	attempts                        int
	lastEnter                       time.Time
}

func (e *entry) snapshot() entryState {
	e.mu.Lock()
	defer e.mu.Unlock()
	return entryState{held: e.held, waiting: e.waiting, unowned: e.unowned, reached: e.reached, standby: e.standby, attempts: e.attempts, lastEnter: e.lastEnter}
}

// restart forgets the attempts of a relay that ended (the next one
// starts with its check). A place still held (none should be: the stream
// gives it back) is given back.
func (e *entry) restart() {
	e.mu.Lock()
	e.attempts = 0
	held := e.held
	e.held = false
	e.mu.Unlock()
	if held {
		e.log.Error().Msg("fleet: a relay ended holding capacity; given back")
		e.g.give()
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
