// Package relay joins the pipeline's stages:
//
//	replication.Stream ──events──► pipeline (decoder, checkpoint, routing, window)
//	     ▲                                 │ one channel per sink
//	     │ confirmed LSN                   ▼
//	checkpoint.Tracker ◄──acks── publish.Runner × sinks
//
// Each channel is written and closed by one goroutine; all run under one
// errgroup, so any stage's error stops the others. The confirmed LSN only
// ever comes from the Tracker, which only moves past a transaction once
// every sink acknowledged every message of it.
//
// Shutdown: when the context passed to Run ends, the stream stops reading
// and closes its channel; the pipeline hands on what it had and closes the
// sinks' channels; the runners publish what is left (bounded by
// ShutdownTimeout) and the stream sends the final confirmed position.
//
// A Relay is used once: New, Run, then Close.
package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/walpost/walpost/internal/checkpoint"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/replication"
)

// Relay is one configured relay.
type Relay struct {
	cfg     *config.Config
	log     zerolog.Logger
	sinks   []publish.Sink
	target  replication.Target
	metrics *Metrics

	progress *progressStore
	loaded   map[string]Position

	mu      sync.Mutex
	tracker *checkpoint.Tracker
	window  *publish.Window
	stream  *replication.Stream
	ready   bool
}

// New opens the sinks. It does not connect to Postgres (Run does). On
// error the sinks opened so far are closed.
func New(cfg *config.Config, log zerolog.Logger, metrics *Metrics) (*Relay, error) {
	r := &Relay{cfg: cfg, log: log, target: TargetOf(cfg), metrics: metrics}
	if r.metrics == nil {
		r.metrics = NewMetrics(nil)
	}
	for i := range cfg.Sinks {
		s, err := publish.Open(context.Background(), i, &cfg.Sinks[i], log)
		if err != nil {
			r.Close()
			return nil, err
		}
		r.sinks = append(r.sinks, s)
	}
	return r, nil
}

// TargetOf derives the replication target from the config.
func TargetOf(cfg *config.Config) replication.Target {
	schema, table, _ := strings.Cut(cfg.Postgres.Table, ".")
	return replication.Target{
		Schema: schema, Table: table,
		Publication: cfg.Postgres.Publication, Slot: cfg.Postgres.Slot,
		Columns: map[string]string{
			"columns.id": cfg.Columns.ID, "columns.type": cfg.Columns.Type, "columns.key": cfg.Columns.Key,
			"columns.payload": cfg.Columns.Payload, "columns.headers": cfg.Columns.Headers,
		},
	}
}

// Close closes the sinks, in reverse order.
func (r *Relay) Close() error {
	var errs []error
	for i := len(r.sinks) - 1; i >= 0; i-- {
		if err := r.sinks[i].Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing sink %s: %w", r.sinks[i].Name(), err))
		}
	}
	r.sinks = nil
	return errors.Join(errs...)
}

// Prepare checks the server and creates the publication and slot when
// missing. It returns the slot's state.
func (r *Relay) Prepare(ctx context.Context) (replication.SlotInfo, error) {
	conn, err := pgx.Connect(ctx, r.cfg.Postgres.URL)
	if err != nil {
		return replication.SlotInfo{}, fmt.Errorf("connecting to postgres.url: %w", err)
	}
	defer conn.Close(context.Background())
	if err := replication.CheckServer(ctx, conn, r.target); err != nil {
		return replication.SlotInfo{}, err
	}
	if created, err := replication.EnsurePublication(ctx, conn, r.target); err != nil {
		return replication.SlotInfo{}, err
	} else if created {
		r.log.Info().Str("publication", r.target.Publication).Msg("publication created")
	}
	info, created, err := replication.EnsureSlot(ctx, conn, r.target.Slot)
	if err != nil {
		return info, err
	}
	if created {
		r.log.Info().Str("slot", r.target.Slot).Str("lsn", info.ConfirmedFlush.String()).Msg("replication slot created")
	}
	r.loaded, err = loadProgress(ctx, conn, quoteTable(r.cfg.Postgres.ProgressTable), r.target.Slot)
	if err != nil {
		return info, err
	}
	if r.cfg.Relay.OnInvalid == "dead_letter" || r.cfg.Relay.OnRefused == "dead_letter" {
		if err := r.deadLetter().ensure(ctx, conn); err != nil {
			return info, err
		}
	}
	return info, nil
}

// SinkProgress reads the per-sink positions saved for the slot (nil when
// the progress table is disabled or does not exist yet).
func SinkProgress(ctx context.Context, conn *pgx.Conn, cfg *config.Config) (map[string]Position, error) {
	table := quoteTable(cfg.Postgres.ProgressTable)
	if table == "" {
		return nil, nil
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil || !exists {
		return nil, err
	}
	return readProgress(ctx, conn, table, cfg.Postgres.Slot)
}

func (r *Relay) deadLetter() *deadLetter {
	return &deadLetter{url: r.cfg.Postgres.URL, table: quoteTable(r.cfg.Postgres.DeadLetterTable), slot: r.cfg.Postgres.Slot}
}

// Ready reports whether the relay is streaming (for /readyz).
func (r *Relay) Ready() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready && r.stream != nil && r.stream.Connected()
}

func mapping(cfg *config.Config) decoder.Mapping {
	t := TargetOf(cfg)
	opt := func(c string) string {
		if c == "-" {
			return ""
		}
		return c
	}
	return decoder.Mapping{Schema: t.Schema, Table: t.Table, ID: cfg.Columns.ID, Type: cfg.Columns.Type,
		Key: opt(cfg.Columns.Key), Payload: cfg.Columns.Payload, Headers: opt(cfg.Columns.Headers)}
}

// Run prepares the server, then relays until ctx ends (graceful: returns
// nil once drained and confirmed) or a stage fails (returns its error).
func (r *Relay) Run(ctx context.Context) error {
	info, err := r.Prepare(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started
		}
		return err
	}
	cfg := r.cfg
	tracker := checkpoint.New(info.ConfirmedFlush)
	window := publish.NewWindow(cfg.Relay.WindowMessages, cfg.Relay.WindowBytes)

	g, gctx := errgroup.WithContext(context.Background())
	readCtx, stopReading := context.WithCancel(gctx)
	defer stopReading()
	stopOnSignal := context.AfterFunc(ctx, stopReading)
	defer stopOnSignal()
	sinkCtx, cancelSinks := context.WithCancel(gctx)
	defer cancelSinks()
	drainTimer := context.AfterFunc(ctx, func() {
		time.AfterFunc(cfg.Relay.ShutdownTimeout.D(), cancelSinks)
	})
	defer drainTimer()

	drained := make(chan struct{})
	progress := &progressStore{url: cfg.Postgres.URL, table: quoteTable(cfg.Postgres.ProgressTable), slot: cfg.Postgres.Slot,
		log: r.log, pos: map[string]Position{}}
	for name, p := range r.loaded {
		progress.pos[name] = p
		r.log.Info().Str("sink", name).Str("commit_lsn", p.CommitLSN.String()).Str("lsn", p.LSN.String()).
			Msg("sink progress loaded; messages up to it are not sent to this sink again")
	}
	r.progress = progress
	g.Go(func() error { return progress.Run(readCtx, 250*time.Millisecond, drained) })
	stream := replication.NewStream(replication.StreamOptions{
		URL: cfg.Postgres.URL, Slot: cfg.Postgres.Slot, Publication: cfg.Postgres.Publication,
		StatusInterval: cfg.Postgres.StatusInterval.D(), MaxBackoff: cfg.Postgres.ReconnectBackoff.D(),
		Drained: drained, Log: r.log,
	}, tracker)
	r.mu.Lock()
	r.tracker, r.window, r.stream, r.ready = tracker, window, stream, true
	r.mu.Unlock()
	r.metrics.watch(tracker, window, stream)

	// Batches the stream read but the pipeline has not taken: at most
	// 256 KiB of message data each (replication's maxBatchBytes, or one
	// larger message), so this bounds memory outside the window to about
	// 16 MiB. Fewer slots slow a catch-up (the stream and the pipeline
	// take turns more often): 8 cost ~15% of its rate.
	events := make(chan []replication.Event, 64)
	sinkChans := make([]chan []publish.Delivery, len(r.sinks))
	for i := range sinkChans {
		sinkChans[i] = make(chan []publish.Delivery, 256)
	}

	g.Go(func() error { return stream.Run(readCtx, gctx, events) })
	g.Go(func() error {
		return replication.RunHeartbeat(readCtx, cfg.Postgres.URL, cfg.Postgres.HeartbeatInterval.D(), stream, r.log)
	})
	g.Go(func() error {
		p := &pipeline{dec: decoder.New(mapping(cfg)), tracker: tracker, window: window,
			sinks: sinkChans, routes: cfg.Sinks, metrics: r.metrics, log: r.log}
		if cfg.Relay.OnInvalid == "dead_letter" {
			p.dead = r.deadLetter()
			defer p.dead.close()
		}
		for _, s := range cfg.Sinks {
			p.skip = append(p.skip, r.loaded[s.Name])
		}
		err := p.run(gctx, events) // closes the sinks' channels
		var de *decoder.Error
		if errors.As(err, &de) {
			// Bad input: deliver and confirm everything before it, then stop.
			stopReading()
			for range events {
			}
			select {
			case <-drained:
			case <-time.After(cfg.Relay.ShutdownTimeout.D()):
			}
		}
		return err
	})
	var runners sync.WaitGroup
	for i, s := range r.sinks {
		runners.Add(1)
		sinkName := s.Name()
		published := r.metrics.published.WithLabelValues(sinkName)
		latency := r.metrics.latency.WithLabelValues(sinkName)
		sinkLog := r.log.With().Str("sink", sinkName).Logger()
		// settle records that the sink is done with batch: the tracker may
		// confirm it, the window frees it, the sink's progress moves.
		settle := func(batch []publish.Delivery, sent bool) {
			now := time.Now()
			var bytes int64
			txns := make([]*checkpoint.Txn, len(batch))
			for i, d := range batch {
				bytes += int64(d.Msg.Size())
				txns[i] = d.Tag.(*checkpoint.Txn)
				if sent {
					latency.Observe(now.Sub(d.Msg.CommitTime).Seconds())
				}
			}
			tracker.AckAll(txns)
			window.Release(len(batch), bytes)
			last := batch[len(batch)-1].Msg
			progress.Acked(sinkName, Position{CommitLSN: last.CommitLSN, LSN: last.LSN})
			if sent {
				published.Add(float64(len(batch)))
			}
		}
		var refusedFn func(context.Context, publish.Delivery, error) error
		if cfg.Relay.OnRefused == "dead_letter" {
			dead := r.deadLetter()
			defer dead.close() // after g.Wait: the runner has returned
			refused := r.metrics.refused.WithLabelValues(sinkName)
			refusedFn = func(ctx context.Context, d publish.Delivery, cause error) error {
				if err := dead.parkRefused(ctx, sinkName, d.Msg, cause); err != nil {
					return fmt.Errorf("%w; the refusal: %v", err, cause)
				}
				refused.Inc()
				sinkLog.Error().Str("msg_id", d.Msg.ID).Str("lsn", d.Msg.LSN.String()).Str("commit_lsn", d.Msg.CommitLSN.String()).
					Str("type", d.Msg.Type).Str("error", cause.Error()).
					Msg("message refused by the sink for good; parked in the dead-letter table; going on")
				settle([]publish.Delivery{d}, false)
				return nil
			}
		}
		runner := publish.NewRunner(s, sinkChans[i], publish.RunnerOptions{
			BatchSize:       cfg.Relay.BatchSize,
			MaxBackoff:      cfg.Relay.RetryBackoff.D(),
			Ack:             func(batch []publish.Delivery) { settle(batch, true) },
			Failing:         func(f bool) { r.metrics.setFailing(sinkName, f) },
			Refused:         refusedFn,
			RefusedAttempts: cfg.Relay.RefusedAttempts,
			Log:             sinkLog,
		})
		g.Go(func() error {
			defer runners.Done()
			err := runner.Run(sinkCtx)
			if err != nil && sinkCtx.Err() != nil && gctx.Err() == nil && ctx.Err() != nil {
				n, _ := window.InFlight()
				return fmt.Errorf("shutdown: sink %s did not drain within relay.shutdown_timeout (%v); %d deliveries in flight will be sent again after restart",
					sinkName, cfg.Relay.ShutdownTimeout.D(), n)
			}
			if err != nil {
				return fmt.Errorf("sink %s: %w", sinkName, err)
			}
			return nil
		})
	}
	go func() { runners.Wait(); close(drained) }()

	err = g.Wait()
	r.mu.Lock()
	r.ready = false
	r.mu.Unlock()
	r.log.Info().Str("slot", cfg.Postgres.Slot).Str("confirmed", tracker.Confirmed().String()).Msg("relay stopped")
	return err
}

// pipeline is the stage between the stream and the sinks. It alone writes
// and closes the sinks' channels.
type pipeline struct {
	dec     *decoder.Decoder
	tracker *checkpoint.Tracker
	window  *publish.Window
	sinks   []chan []publish.Delivery
	out     [][]publish.Delivery // per sink: deliveries of this input batch, not sent yet
	routes  []config.Sink
	metrics *Metrics
	log     zerolog.Logger
	skip    []Position  // per sink: what it acknowledged before a restart
	dead    *deadLetter // nil: stop on a bad row
	txn     *checkpoint.Txn
	targets []int
}

func (p *pipeline) run(ctx context.Context, events <-chan []replication.Event) error {
	defer func() {
		for _, c := range p.sinks {
			close(c)
		}
	}()
	p.out = make([][]publish.Delivery, len(p.sinks))
	for batch := range events {
		for _, ev := range batch {
			switch ev.Kind {
			case replication.Reset:
				p.dec.Reset()
				p.tracker.Abandon()
				p.txn = nil
			case replication.Keepalive:
				if !p.dec.InTransaction() {
					p.tracker.Progress(ev.LSN)
				}
			case replication.Data:
				if err := p.data(ctx, ev); err != nil {
					// Hand on what came before the failure.
					if ferr := p.flush(ctx); ferr != nil {
						return ferr
					}
					return err
				}
			}
		}
		if err := p.flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// flush sends each sink the deliveries gathered from the input batch.
func (p *pipeline) flush(ctx context.Context) error {
	for i, ds := range p.out {
		if len(ds) == 0 {
			continue
		}
		select {
		case p.sinks[i] <- ds:
		case <-ctx.Done():
			return ctx.Err()
		}
		p.out[i] = nil
	}
	return nil
}

func (p *pipeline) data(ctx context.Context, ev replication.Event) error {
	e, err := p.dec.Decode(ev.LSN, ev.Data)
	if err != nil {
		var de *decoder.Error
		switch {
		case !errors.As(err, &de):
			return err
		case de.Table:
			// Parking would take every row of the table: stop whatever
			// relay.on_invalid says.
			return fmt.Errorf("%w; the slot stays before this message's transaction (confirmed %s): after the fix, restart and the rows are delivered",
				err, p.tracker.Confirmed())
		case p.dead == nil:
			return fmt.Errorf("%w; the slot stays before this message's transaction (confirmed %s): fix the row's producer, then remove or repair the row's transaction effect and restart — walpost will not skip it silently",
				err, p.tracker.Confirmed())
		}
		if err := p.dead.park(ctx, de); err != nil {
			return err
		}
		p.metrics.deadLettered.Inc()
		p.log.Error().Str("msg_id", de.ID).Str("lsn", de.LSN.String()).Str("commit_lsn", de.CommitLSN.String()).
			Str("error", de.Err.Error()).Msg("bad outbox row parked in the dead-letter table; going on")
		return nil
	}
	switch e.Kind {
	case decoder.Begin:
		p.txn = p.tracker.Begin()
	case decoder.Commit:
		if p.txn == nil {
			return fmt.Errorf("%w: commit at %s without begin", decoder.ErrProtocol, e.LSN)
		}
		p.tracker.Commit(p.txn, e.LSN)
		p.txn = nil
	case decoder.Progress:
		p.tracker.Progress(e.LSN)
	case decoder.Row:
		p.metrics.decoded.Inc()
		p.targets = p.targets[:0]
		for i := range p.routes {
			if p.routes[i].Route.Matches(e.Msg.Type) && !p.skip[i].Covers(e.Msg.CommitLSN, e.Msg.LSN) {
				p.targets = append(p.targets, i)
			}
		}
		if len(p.targets) == 0 {
			p.log.Debug().Str("msg_id", e.Msg.ID).Str("type", e.Msg.Type).Msg("no sink needs this message (not routed, or acknowledged before a restart)")
			return nil
		}
		n := len(p.targets)
		size := int64(n * e.Msg.Size())
		if !p.window.TryAcquire(n, size) {
			// The window is full: hand on what is gathered (its acks are
			// what frees the window), then wait.
			if err := p.flush(ctx); err != nil {
				return err
			}
			if err := p.window.Acquire(ctx, n, size); err != nil {
				return err // the relay is failing; nothing after this may be tracked
			}
		}
		p.tracker.Add(p.txn, n)
		d := publish.Delivery{Msg: e.Msg, Tag: p.txn}
		for _, i := range p.targets {
			p.out[i] = append(p.out[i], d)
		}
	}
	return nil
}
