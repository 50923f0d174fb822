package pipeline

import (
	"context"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/store"
)

// What the pipeline is handed by the relay, as the pipeline uses it. The
// relay supplies store.DeadLetter, sentat.Marker, store.Progress and its
// Prometheus counters; the tests supply fakes.

// DeadLetters parks the rows the pipeline may not publish (store.DeadLetter:
// relay.on_invalid: dead_letter, forged envelopes, rows parked by `cdc
// skip`). It is used from the pipeline's goroutine only.
type DeadLetters interface {
	// Park stores e's row durably, for every sink, with errText as its
	// error (e.Err's text when ""), and returns once it is stored: the row's
	// transaction may be confirmed from then on. Parking a row again is a
	// no-op.
	Park(ctx context.Context, e *decoder.Error, errText string) error
	// Parked reports whether the row at (lsn, seq) is parked for every
	// sink (by relay.on_invalid: dead_letter or by `cdc skip`).
	Parked(ctx context.Context, lsn pglogrepl.LSN, seq uint32) (bool, error)
}

// HoldStore parks by ordering key (Policy.Hold: relay.on_invalid or
// on_refused: hold_key; store.DeadLetter, "Held keys" in
// docs/design.md): the head that holds a key, and each later message of
// the key behind it. The pipeline's is used from its goroutine only, each
// settler's from its sink runner's.
type HoldStore interface {
	// ParkHead parks a row that cannot be mapped, for every sink, as the
	// head of its key (e.Key): its key is held from then on.
	ParkHead(ctx context.Context, e *decoder.Error) error
	// ParkRefusedHead parks a message sink refused for good as the head of
	// its key for that sink.
	ParkRefusedHead(ctx context.Context, sink string, m *message.Message, cause error) error
	// ParkBehind parks m behind its key's head for sink ("" every sink)
	// and reports true, or reports false when the key was released
	// meanwhile (m is then published as usual).
	ParkBehind(ctx context.Context, sink string, m *message.Message) (bool, error)
}

// Refusals parks the messages a sink refuses for good (store.DeadLetter;
// relay.on_refused: dead_letter). Each sink's settler has its own, used
// from that sink's runner goroutine only.
type Refusals interface {
	// ParkRefused stores m, refused by sink with cause, durably and
	// returns once it is stored.
	ParkRefused(ctx context.Context, sink string, m *message.Message, cause error) error
}

// Marker is handed the message ids of each committed transaction
// (sentat.Marker, columns.sent_at). Safe for concurrent use.
type Marker interface {
	// Full reports whether Add of n ids would wait: the pipeline then
	// hands on what it holds for the sinks first, as their
	// acknowledgements are what lets the marking catch up.
	Full(n int) bool
	// Add records a committed transaction's message ids: end is the end of
	// its commit record, xid its id from the Begin. The pipeline calls it
	// before telling the tracker of the commit, in stream order. It may
	// wait while the marking is behind, until ctx ends (its error).
	Add(ctx context.Context, end pglogrepl.LSN, xid uint32, ids []string) error
}

// Progress keeps each sink's acknowledged position (store.Progress). Safe
// for concurrent use.
type Progress interface {
	// Acked records that sink acknowledged everything up to p; a position
	// at or before the one recorded changes nothing.
	Acked(sink string, p store.Position)
}

// Counter counts (a prometheus.Counter is one). Safe for concurrent use.
type Counter interface {
	Inc()
	Add(float64)
}

// Gauge is set (a prometheus.Gauge is one). Safe for concurrent use.
type Gauge interface {
	Set(float64)
}

// Observer takes samples (a prometheus.Observer is one). Safe for
// concurrent use.
type Observer interface {
	Observe(float64)
}

// Metrics are the pipeline's counters; a nil one counts nothing.
type Metrics struct {
	Decoded          Counter // rows decoded from the stream
	DeadLettered     Counter // bad rows parked (relay.on_invalid: dead_letter)
	ForgedEnvelopes  Counter // envelopes without a valid signature, parked
	ForgedAdopts     Counter // adopt messages no cdc init wrote, ignored
	ForeignRelations Counter // relations other than the outbox, once each
	Held             Counter // messages parked behind a held key (relay.on_invalid: hold_key)
	HeldKeys         Gauge   // keys held for every sink (relay.on_invalid: hold_key)
	// Messages expired when read (relay.on_expired), by what was done:
	// dropped, parked for their sinks, or sent all the same.
	ExpiredDropped, ExpiredParked, ExpiredSent Counter
}

// SinkMetrics are one sink's counters; a nil one counts nothing.
type SinkMetrics struct {
	Published Counter  // deliveries the sink acknowledged
	Latency   Observer // per acknowledged delivery: seconds from its commit
	Refused   Counter  // deliveries refused for good and parked
	Held      Counter  // deliveries parked behind a key held for the sink (relay.on_refused: hold_key)
	HeldKeys  Gauge    // keys held for the sink (relay.on_refused: hold_key)
}

type nop struct{}

func (nop) Inc()            {}
func (nop) Add(float64)     {}
func (nop) Observe(float64) {}
func (nop) Set(float64)     {}

func gauge(g Gauge) Gauge {
	if g == nil {
		return nop{}
	}
	return g
}

func counter(c Counter) Counter {
	if c == nil {
		return nop{}
	}
	return c
}

func (m Metrics) orNop() Metrics {
	return Metrics{Decoded: counter(m.Decoded), DeadLettered: counter(m.DeadLettered), ForgedEnvelopes: counter(m.ForgedEnvelopes),
		ForgedAdopts: counter(m.ForgedAdopts), ForeignRelations: counter(m.ForeignRelations), Held: counter(m.Held), HeldKeys: gauge(m.HeldKeys),
		ExpiredDropped: counter(m.ExpiredDropped), ExpiredParked: counter(m.ExpiredParked), ExpiredSent: counter(m.ExpiredSent)}
}

func (m SinkMetrics) orNop() SinkMetrics {
	if m.Latency == nil {
		m.Latency = nop{}
	}
	return SinkMetrics{Published: counter(m.Published), Latency: m.Latency, Refused: counter(m.Refused), Held: counter(m.Held), HeldKeys: gauge(m.HeldKeys)}
}
