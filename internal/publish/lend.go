package publish

import (
	"context"
	"fmt"
	"sync"

	"github.com/walpost/walpost/internal/message"
)

// Lent is a running relay's sink lent to others beside its runner: the
// console's resends and releases go through the relay's own sinks (a file
// sink's file is the relay's, locked; a broker gets no second connection
// per click). Publish holds the Lent's lock, which the runner holds around
// each of its own publishes (RunnerOptions.Lock), so the two take turns;
// Close does nothing (the relay closes the sink); after Retire, when the
// relay's cycle ended, Publish fails at once. Safe for concurrent use.
type Lent struct {
	mu        sync.Mutex
	sink      Sink
	retired   bool
	published func(n int) // nil: not counted
}

// Lend returns s lent; published, when set, counts what a lent Publish
// delivered (the relay's walpost_messages_published_total).
func Lend(s Sink, published func(n int)) *Lent { return &Lent{sink: s, published: published} }

// Name is the sink's.
func (l *Lent) Name() string { return l.sink.Name() }

// Publish publishes msgs through the relay's sink, between its runner's
// publishes.
func (l *Lent) Publish(ctx context.Context, msgs []*message.Message) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.retired {
		return fmt.Errorf("sink %s: the relay's cycle that held it ended (it reconnects); try again", l.sink.Name())
	}
	err := l.sink.Publish(ctx, msgs)
	if err == nil && l.published != nil {
		l.published(len(msgs))
	}
	return err
}

// Schedules is the sink's (Scheduler).
func (l *Lent) Schedules() bool { return Schedules(l.sink) }

// Close does nothing: the relay closes its sink.
func (l *Lent) Close() error { return nil }

// Lock and Unlock are what the runner holds around its publishes.
func (l *Lent) Lock()   { l.mu.Lock() }
func (l *Lent) Unlock() { l.mu.Unlock() }

// Retire makes every later Publish fail: the relay is about to close the
// sink.
func (l *Lent) Retire() {
	l.mu.Lock()
	l.retired = true
	l.mu.Unlock()
}
