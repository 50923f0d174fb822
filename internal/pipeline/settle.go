package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/checkpoint"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/store"
)

// SettlerOptions configures one sink's Settler. Sink, Tracker, Window and
// Progress are required.
type SettlerOptions struct {
	Sink     string
	Tracker  *checkpoint.Tracker
	Window   *Window
	Progress Progress
	// Refusals, when set, parks what the sink refuses for good
	// (relay.on_refused: dead_letter; Settler.Refused).
	Refusals Refusals
	// Refused is relay.on_refused. Park (with Refusals) parks a refused
	// message; HoldKey parks it as the head of its key for the sink:
	// every later message of the key is parked behind it (Settler.Holds,
	// Settler.Hold) until the key is released. With Stop the runner is
	// given no Refused and stops at a refusal.
	Refused Policy
	// HoldStore parks by key: required with Refused HoldKey or Holds.
	HoldStore HoldStore
	// Holds are the keys held for the sink when the run starts
	// (store.ListHolds), held whatever Refused is; those of other sinks
	// are left out.
	Holds   []store.Hold
	Metrics SinkMetrics
	Log     zerolog.Logger // with the sink's name
}

// Settler records what one sink is done with: the tracker may confirm it,
// the window frees it, the sink's progress moves, and it is counted. Its
// Ack and Refused are the sink runner's publish.RunnerOptions.Ack and
// Refused, called from the runner's goroutine only.
type Settler struct {
	o    SettlerOptions
	txns []*checkpoint.Txn // Ack's, reused from one batch to the next
	held *heldKeys         // keys held for the sink (SettlerOptions.HoldStore)
}

// NewSettler returns the settler of one sink.
func NewSettler(o SettlerOptions) *Settler {
	o.Metrics = o.Metrics.orNop()
	return &Settler{o: o, held: newHeldKeys(o.Sink, o.Holds, o.HoldStore, o.Metrics.Held, o.Metrics.HeldKeys, o.Log,
		"refused message (relay.on_refused: hold_key)")}
}

// Ack settles a batch the sink made durable, in WAL order
// (publish.RunnerOptions.Ack).
func (s *Settler) Ack(batch []publish.Delivery) { s.settle(batch, true) }

// Refused parks d, which the sink refuses for good with cause, in the
// dead-letter table and settles it (publish.RunnerOptions.Refused; only
// with SettlerOptions.Refusals). An error to park it stops the runner:
// d stays unacknowledged.
func (s *Settler) Refused(ctx context.Context, d publish.Delivery, cause error) error {
	if s.o.Refused.holds() {
		return s.refusedHead(ctx, d, cause)
	}
	if err := s.o.Refusals.ParkRefused(ctx, s.o.Sink, d.Msg, cause); err != nil {
		return fmt.Errorf("%w; the refusal: %v", err, cause)
	}
	s.o.Metrics.Refused.Inc()
	s.o.Log.Error().Str("msg_id", d.Msg.ID).Str("lsn", d.Msg.LSN.String()).Uint32("seq", d.Msg.Seq).Str("commit_lsn", d.Msg.CommitLSN.String()).
		Str("type", d.Msg.Type).Str("error", cause.Error()).
		Msg("message refused by the sink for good; parked in the dead-letter table; going on")
	s.settle([]publish.Delivery{d}, false)
	return nil
}

// settle acknowledges batch in the tracker, frees its room in the window
// and moves the sink's progress to its last message; sent says the sink
// published it (counted, its latency observed) rather than refused it.
func (s *Settler) settle(batch []publish.Delivery, sent bool) {
	now := time.Now()
	var bytes int64
	s.txns = s.txns[:0]
	for _, d := range batch {
		bytes += int64(d.Msg.Size())
		s.txns = append(s.txns, d.Txn)
		if sent {
			s.o.Metrics.Latency.Observe(now.Sub(d.Msg.CommitTime).Seconds())
		}
	}
	s.o.Tracker.AckAll(s.txns)
	clear(s.txns) // no entry kept alive past its transaction
	s.o.Window.Release(len(batch), bytes)
	last := batch[len(batch)-1].Msg
	s.o.Progress.Acked(s.o.Sink, store.PositionOf(last))
	if sent {
		s.o.Metrics.Published.Add(float64(len(batch)))
	}
}

// refusedHead parks d, refused with cause, as the head of its key for the
// sink and settles it: the key is held from then on.
func (s *Settler) refusedHead(ctx context.Context, d publish.Delivery, cause error) error {
	if err := s.o.HoldStore.ParkRefusedHead(ctx, s.o.Sink, d.Msg, cause); err != nil {
		return fmt.Errorf("%w; the refusal: %v", err, cause)
	}
	s.o.Metrics.Refused.Inc()
	key := d.Msg.OrderingKey()
	s.held.add(key, store.PositionOf(d.Msg))
	s.o.Log.Error().Str("msg_id", d.Msg.ID).Str("lsn", d.Msg.LSN.String()).Uint32("seq", d.Msg.Seq).Str("commit_lsn", d.Msg.CommitLSN.String()).
		Str("type", d.Msg.Type).Str("key", key).Str("error", cause.Error()).
		Msg("message refused by the sink for good; parked in the dead-letter table; its key is held for this sink: its later messages are parked behind it until cdc dead-letter resend or drop of it; the other keys go on")
	s.settle([]publish.Delivery{d}, false)
	return nil
}

// Holds reports whether m's key is held for the sink and m is not before
// its head (publish.Holder).
func (s *Settler) Holds(m *message.Message) bool { return s.held.holds(m, false) }

// Hold parks d behind its key's head and settles it, or reports false
// when the key was released meanwhile (it is forgotten; publish.Holder).
func (s *Settler) Hold(ctx context.Context, d publish.Delivery) (bool, error) {
	held, err := s.held.hold(ctx, d.Msg)
	if held {
		s.settle([]publish.Delivery{d}, false)
	}
	return held, err
}
