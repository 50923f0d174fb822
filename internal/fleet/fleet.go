package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/backoff"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/relay"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/tracing"
)

// Options configure a Fleet.
type Options struct {
	// MaxActive is the most sources whose slots the instance holds at
	// once (--max-active; 0: no limit).
	MaxActive int
	// Log is the process's logger; each source logs with source=<name>.
	Log zerolog.Logger
	// Registry receives each source's metrics with the label
	// source=<name>, and the instance's own (walpost_fleet_*). It is
	// also read for /sources (the sinks failing). Nil: none.
	Registry *prometheus.Registry
	// Redact cuts secrets out of the errors /sources shows (nil: none).
	Redact func(string) string
	// FailureBackoff and MaxFailureBackoff bound the wait before a
	// source whose relay stopped with an error is started again: the
	// first wait is FailureBackoff (less up to half), doubling up to
	// MaxFailureBackoff (defaults 30 s and 5 min).
	FailureBackoff, MaxFailureBackoff time.Duration
	// StartGrace is how long after the start a source still checking its
	// server keeps /readyz at 503 (default 30 s).
	StartGrace time.Duration
	// Tracing, when set, is the process's tracing provider (tracing.Start
	// of Shared.Tracing): every source's relay records its publish spans
	// with it, each span naming its source (walpost.source). Nil: off.
	Tracing *tracing.Provider
}

// The defaults of Options.
const (
	DefaultFailureBackoff    = 30 * time.Second
	DefaultMaxFailureBackoff = 5 * time.Minute
	DefaultStartGrace        = 30 * time.Second
)

// Fleet runs several sources in one process, each its own relay.Relay
// with its own database, slot, sinks, progress and dead letters, sharing
// only the instance's capacity (Gate), its HTTP listener, its log and its
// tracing exporter.
// A source whose relay stops with an error is reported (log, metrics,
// /readyz?verbose, /sources) and started again after a backoff; the
// others go on. Use New, then Run once; the other methods are safe for
// concurrent use.
type Fleet struct {
	opt      Options
	gate     *Gate
	slots    *slotWatch // the standbys' wait for their slots
	sources  []*source
	started  atomic.Int64 // unix nanoseconds Run started at; 0 before
	stopping atomic.Bool
}

// source is one source of a Fleet and its supervisor's state.
type source struct {
	Source
	log      zerolog.Logger
	metrics  *relay.Metrics
	tracing  *tracing.Provider // the process's, naming the source; nil: off
	entry    *entry
	failedG  prometheus.Gauge
	failures prometheus.Counter

	mu      sync.Mutex
	relay   *relay.Relay // the current run's; a Relay is used once
	failed  bool
	err     error
	retryAt time.Time
	nfailed int
	stopped bool
}

// New prepares every source: its metrics, labelled source=<name>, and a
// first relay.New, whose errors are configuration errors (a sink's
// settings; cdc run exits 2). Nothing connects before Run.
func New(sources []Source, opt Options) (*Fleet, error) {
	if opt.FailureBackoff <= 0 {
		opt.FailureBackoff = DefaultFailureBackoff
	}
	if opt.MaxFailureBackoff <= 0 {
		opt.MaxFailureBackoff = DefaultMaxFailureBackoff
	}
	if opt.StartGrace <= 0 {
		opt.StartGrace = DefaultStartGrace
	}
	if opt.Redact == nil {
		opt.Redact = func(s string) string { return s }
	}
	f := &Fleet{opt: opt, gate: NewGate(opt.MaxActive, len(sources)), slots: newSlotWatch()}
	var reg prometheus.Registerer
	if opt.Registry != nil {
		reg = opt.Registry
		f.registerMetrics(reg)
	}
	for _, src := range sources {
		s := &source{Source: src, log: opt.Log.With().Str("source", src.Name).Logger(), tracing: opt.Tracing.WithSource(src.Name)}
		var sreg prometheus.Registerer
		if reg != nil {
			sreg = prometheus.WrapRegistererWith(prometheus.Labels{"source": src.Name}, reg)
		}
		s.metrics = relay.NewMetrics(sreg)
		g := NewSourceGauges(sreg)
		s.failedG, s.failures = g.Failed, g.Failures
		url, slot := src.Config.Postgres.URL, src.Config.Postgres.Slot
		s.entry = &entry{g: f.gate, poll: src.Config.Postgres.StandbyPoll.D(), log: s.log, sleep: backoff.Sleep,
			probe: slotUnowned(url, slot), waitingG: g.Waiting, unownedG: g.Unowned,
			free: func(ctx context.Context, poll time.Duration) { f.slots.wait(ctx, url, slot, poll) }}
		r, err := relay.New(src.Config, s.log, s.metrics)
		if err != nil {
			return nil, fmt.Errorf("config %s: %w", src.Path, err)
		}
		s.relay = r
		f.sources = append(f.sources, s)
	}
	return f, nil
}

// SourceGauges are the series a process of several sources keeps per
// source besides relay.NewMetrics' (each labelled source=<name> by the
// registerer New wraps).
type SourceGauges struct {
	Failed   prometheus.Gauge   // walpost_source_failed
	Failures prometheus.Counter // walpost_source_failures_total
	Waiting  prometheus.Gauge   // walpost_source_waiting_for_capacity
	Unowned  prometheus.Gauge   // walpost_source_unowned
}

// NewSourceGauges makes a source's gauges and registers them with reg
// when it is not nil. The deploy module's tests call it to learn which
// names the alerts may use.
func NewSourceGauges(reg prometheus.Registerer) SourceGauges {
	g := SourceGauges{
		Failed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "walpost_source_failed",
			Help: "1 while the source's relay stopped with an error and waits to be started again (a process of several sources)."}),
		Failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "walpost_source_failures_total",
			Help: "Times the source's relay stopped with an error (a process of several sources); each is started again after a backoff."}),
		Waiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "walpost_source_waiting_for_capacity",
			Help: "1 while the source waits without trying its slot because this instance holds --max-active slots."}),
		Unowned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "walpost_source_unowned",
			Help: "1 while the source waits for capacity and its slot was last found held by no process: nothing relays it (the fleet lacks capacity)."}),
	}
	if reg != nil {
		reg.MustRegister(g.Failed, g.Failures, g.Waiting, g.Unowned)
	}
	return g
}

func (f *Fleet) registerMetrics(reg prometheus.Registerer) {
	maxActive := prometheus.NewGauge(prometheus.GaugeOpts{Name: "walpost_fleet_max_active",
		Help: "The most sources whose slots this instance holds at once (--max-active; 0: no limit)."})
	maxActive.Set(float64(f.gate.Max()))
	sources := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_fleet_sources",
		Help: "Sources this instance serves (its configuration files)."}, func() float64 { return float64(len(f.sources)) })
	used := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "walpost_fleet_capacity_used",
		Help: "Places of --max-active taken: slots held, and attempts to take one under way."}, func() float64 { return float64(f.gate.Used()) })
	reg.MustRegister(maxActive, sources, used)
}

// slotUnowned returns the probe of a source waiting for capacity: whether
// its slot exists and no process holds it.
func slotUnowned(url, slot string) func(ctx context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		conn, err := pgconnect.Connect(ctx, url)
		if err != nil {
			return false, err
		}
		defer conn.Close(context.Background())
		info, err := replication.ReadSlot(ctx, conn, slot)
		return err == nil && info.Exists && !info.Active, err
	}
}

// Run runs every source until ctx ends, then waits for each to stop
// (drain and confirm, as one relay does). It returns relay.ErrDrainCut
// (wrapped) when relay.shutdown_timeout cut a source's drain, else the
// first error a relay stopped with after ctx ended, else nil. A source's
// failure while ctx lasts does not end Run: it is reported and the
// source started again.
func (f *Fleet) Run(ctx context.Context) error {
	f.started.Store(time.Now().UnixNano())
	stop := context.AfterFunc(ctx, func() { f.stopping.Store(true) })
	defer stop()
	errs := make([]error, len(f.sources))
	var wg sync.WaitGroup
	for i, s := range f.sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f.runSource(ctx, s)
		}()
	}
	wg.Wait()
	var first error
	for i, err := range errs {
		if err == nil {
			continue
		}
		err = fmt.Errorf("source %s: %w", f.sources[i].Name, err)
		if errors.Is(err, relay.ErrDrainCut) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// runSource runs one source's relay, and after an error a new one after
// a backoff, until ctx ends.
func (f *Fleet) runSource(ctx context.Context, s *source) error {
	retry := backoff.New(f.opt.FailureBackoff, f.opt.MaxFailureBackoff)
	c := s.Config
	start := s.log.Info().Str("config", s.Path).Str("slot", c.Postgres.Slot).Int("sinks", len(c.Sinks))
	if c.Postgres.TableLess() {
		start = start.Str("prefix", c.Postgres.MessagePrefix)
	} else {
		start = start.Str("table", c.Postgres.Table)
	}
	start.Msg("starting source")
	for {
		s.mu.Lock()
		r := s.relay
		s.mu.Unlock()
		r.ConfigPath = s.Path
		r.Gate = s.entry
		r.Tracing = s.tracing
		began := time.Now()
		err := r.Run(ctx)
		r.Close()
		s.entry.restart()
		if ctx.Err() != nil {
			s.mu.Lock()
			s.stopped = true
			s.mu.Unlock()
			return err
		}
		if err == nil {
			err = errors.New("the relay stopped without being asked to") // Run returns nil only after ctx ended
		}
		if time.Since(began) > f.opt.MaxFailureBackoff {
			retry.Reset() // it ran well for a while: this is a new failure
		}
		wait := retry.Next()
		s.fail(err, wait)
		if !backoff.Sleep(ctx, wait) {
			s.mu.Lock()
			s.stopped = true
			s.mu.Unlock()
			return nil
		}
		next, nerr := relay.New(c, s.log, s.metrics)
		if nerr != nil { // checked by New: cannot happen
			return nerr
		}
		s.mu.Lock()
		s.relay, s.failed, s.err = next, false, nil
		s.mu.Unlock()
		s.failedG.Set(0)
		s.log.Info().Msg("starting the source again after its failure")
	}
}

// fail records a relay's error: logged, counted, shown until the retry.
func (s *source) fail(err error, wait time.Duration) {
	s.mu.Lock()
	s.failed, s.err, s.retryAt = true, err, time.Now().Add(wait)
	s.nfailed++
	s.mu.Unlock()
	s.failedG.Set(1)
	s.failures.Inc()
	s.log.Error().Err(err).Dur("retry_in_ms", wait).
		Msg("source failed; the other sources go on; it is started again after the wait (walpost_source_failed)")
}

// Lent returns, for the source called name, the sinks its relay lends
// while it streams (relay.Relay.Lent): the console acts through them.
func (f *Fleet) Lent(name string) func() []publish.Sink {
	return func() []publish.Sink {
		for _, s := range f.sources {
			if s.Name == name {
				s.mu.Lock()
				r := s.relay
				s.mu.Unlock()
				if r != nil {
					return r.Lent()
				}
			}
		}
		return nil
	}
}
