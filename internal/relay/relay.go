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
// A run is a sequence of cycles. A cycle checks the server (read-only:
// `cdc run` creates nothing), acquires the slot (a standby waits here, with
// no sink open), and only then reads what it needs to know of the slot's
// state (its confirmed position, each sink's progress), opens the sinks
// and streams. A cycle ends, and the next one starts after a backoff,
// when the server cannot be reached at start, when another process took
// the slot while the stream reconnected (the sinks are closed before the
// relay waits for the slot again), or on a protocol error (malformed
// bytes: the next cycle reconnects from the confirmed position). Any other
// error ends the run.
//
// Shutdown: when the context passed to Run ends, the stream stops reading
// and closes its channel; the pipeline hands on what it had and closes the
// sinks' channels; the runners publish what is left (bounded by
// ShutdownTimeout) and the stream sends the final confirmed position. A
// row that cannot be mapped under relay.on_invalid: stop, and a protocol
// error, take the same path: everything before them is delivered and
// confirmed first.
//
// A Relay is used once: New, Run, then Close.
package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/walpost/walpost/internal/backoff"
	"github.com/walpost/walpost/internal/checkpoint"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/retention"
	"github.com/walpost/walpost/internal/sentat"
	"github.com/walpost/walpost/internal/store"
)

// Relay is one configured relay.
type Relay struct {
	cfg     *config.Config
	log     zerolog.Logger
	openers []publish.Opener
	target  replication.Target
	tables  store.Tables
	metrics *Metrics
	// sentStmt is the UPDATE that fills in columns.sent_at (from the
	// check), "" when it is not mapped.
	sentStmt string
	// retention deletes delivered rows (relay.retention; from the check),
	// nil when it is off.
	retention *retention.Job
	// shape is the outbox table's OID, columns and time column (from the
	// check; coverage.go).
	shape outboxShape

	// ConfigPath names the configuration file in the instructions the
	// relay gives an operator (e.g. the cdc skip command line).
	ConfigPath string
	// Gate, when set, bounds the slots this process holds at once (a
	// fleet of sources, internal/fleet); the stream enters it before each
	// attempt to take the slot. [fleet hook]
	Gate replication.Gate

	// emitWarned: the table-less outbox's emitRisk was logged (once a run).
	emitWarned bool
	// adopted: the transactions whose adopt messages are rows, as the
	// cycle read them (adoptedXids).
	adopted []uint32

	mu     sync.Mutex
	stream *replication.Stream
	window *publish.Window
	ready  bool
}

// New validates the sinks' settings. It does no I/O: no sink is opened
// and nothing connects until Run holds the slot.
func New(cfg *config.Config, log zerolog.Logger, metrics *Metrics) (*Relay, error) {
	r := &Relay{cfg: cfg, log: log, target: TargetOf(cfg), tables: store.TablesOf(cfg), metrics: metrics, ConfigPath: "cdc.yaml"}
	if r.metrics == nil {
		r.metrics = NewMetrics(nil)
	}
	var names []string
	for i := range cfg.Sinks {
		open, err := publish.Prepare(i, &cfg.Sinks[i], log)
		if err != nil {
			return nil, err
		}
		r.openers = append(r.openers, open)
		names = append(names, cfg.Sinks[i].Name)
	}
	r.metrics.addSinks(names)
	return r, nil
}

// TargetOf derives the replication target from the config.
func TargetOf(cfg *config.Config) replication.Target {
	return replication.Target{Outbox: cfg.Outbox(), Publication: cfg.Postgres.Publication, Slot: cfg.Postgres.Slot,
		TableLess: cfg.Postgres.TableLess()}
}

// Close releases what New made (nothing today: sinks are opened and
// closed by Run).
func (r *Relay) Close() error { return nil }

// Ready reports whether the relay is streaming (for /readyz).
func (r *Relay) Ready() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready && r.stream != nil && r.stream.Connected()
}

func (r *Relay) setStream(s *replication.Stream, w *publish.Window, ready bool) {
	r.mu.Lock()
	r.stream, r.window, r.ready = s, w, ready
	r.mu.Unlock()
}

// restart marks a cycle's error after which the relay starts a new cycle
// (after a backoff) instead of stopping.
type restart struct{ error }

func (e restart) Unwrap() error { return e.error }

// Run relays until ctx ends (graceful: returns nil once drained and
// confirmed) or a stage fails for good (returns its error). See the
// package documentation for the cycles it runs.
func (r *Relay) Run(ctx context.Context) error {
	retry := backoff.New(replication.BackoffStart, r.cfg.Postgres.ReconnectBackoff.D())
	held := false // a cycle streamed: the slot existed where this process streamed
	for {
		streamed, err := r.cycle(ctx)
		held = held || streamed
		var re restart
		if !errors.As(err, &re) {
			return r.explainInvalidSlot(r.explainMissingSlot(err, held))
		}
		if ctx.Err() != nil {
			return nil
		}
		if streamed {
			retry.Reset()
		}
		wait := retry.Next()
		if errors.Is(err, replication.ErrSlotLost) {
			wait = 0 // wait for the slot at once, as a standby
			r.log.Warn().Err(err).Str("slot", r.cfg.Postgres.Slot).Msg("sinks closed; waiting for the slot again")
		} else {
			r.log.Warn().Err(err).Dur("retry_in", wait).Msg("relay restarting")
		}
		if !backoff.Sleep(ctx, wait) {
			return nil
		}
	}
}

// cycle runs one cycle: check, acquire, read the slot's state, open the
// sinks, stream. streamed reports whether it got as far as streaming.
func (r *Relay) cycle(ctx context.Context) (streamed bool, err error) {
	cfg := r.cfg
	r.log.Info().Str("postgres", pgconnect.DescribeURL(cfg.Postgres.URL)).Str("slot", cfg.Postgres.Slot).Msg("connecting")
	if err := r.check(ctx); err != nil {
		if ctx.Err() != nil {
			return false, nil // SIGINT/SIGTERM during the check: a clean stop, nothing read
		}
		return false, err
	}
	tracker := checkpoint.New(0)
	drained := make(chan struct{}) // closed once every sink drained after the stream stopped
	var confirmer replication.Confirmer = tracker
	var marker *sentat.Marker
	if r.sentStmt != "" {
		marker = sentat.New(cfg.Postgres.URL, r.sentStmt, tracker, r.log)
		confirmer = marker // the slot waits for rows to be marked sent
	}
	stream := replication.NewStream(replication.StreamOptions{
		URL: cfg.Postgres.URL, Slot: cfg.Postgres.Slot, Publication: cfg.Postgres.Publication,
		StatusInterval: cfg.Postgres.StatusInterval.D(), MaxBackoff: cfg.Postgres.ReconnectBackoff.D(),
		SlotPoll: cfg.Postgres.StandbyPoll.D(), ReceiveBuffer: cfg.Postgres.ReceiveBufferBytes(), Drained: drained, Log: r.log,
		Gate: r.Gate, // [fleet hook]
	}, confirmer)
	r.setStream(stream, nil, false)
	if err := stream.Acquire(ctx); err != nil {
		if ctx.Err() != nil {
			return false, nil
		}
		return false, err
	}
	// The slot is ours: what the relay knows of its state, it reads now.
	st, err := r.readState(ctx)
	if err != nil {
		stream.Release()
		return false, err
	}
	tracker.Progress(st.confirmed)
	sinks, err := r.openSinks(ctx)
	if err != nil {
		stream.Release()
		switch {
		case ctx.Err() != nil:
			return false, nil
		case errors.Is(err, context.DeadlineExceeded):
			// A sink waited too long (the file sink's lock, held by an
			// instance that lost the slot but has not noticed yet): let
			// go of the slot and try again.
			return false, restart{err}
		}
		return false, err
	}
	defer r.closeSinks(sinks)
	r.adopted = st.adopted
	return true, r.streamCycle(ctx, stream, tracker, marker, drained, sinks, st.progress)
}

// check verifies, read-only, what the relay needs of the server. Failing
// to connect is worth another cycle (the server may be starting), unless
// the server refused the role or database (pgconnect.Refused); a failed
// check is not.
func (r *Relay) check(ctx context.Context) error {
	conn, err := pgconnect.Connect(ctx, r.cfg.Postgres.URL)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, pgconnect.ErrURL) {
			return err
		}
		if pgconnect.Refused(err) {
			return fmt.Errorf("%w; %s", err, pgconnect.RefusedHint)
		}
		return restart{err}
	}
	defer conn.Close(context.Background())
	if err := replication.CheckServer(ctx, conn, r.target); err != nil {
		return err
	}
	if risk, err := emitRisk(ctx, conn, r.cfg); err != nil {
		return err
	} else if risk != "" && !r.emitWarned {
		r.emitWarned = true
		r.log.Warn().Str("prefix", r.cfg.Postgres.MessagePrefix).Msg(risk)
	}
	if err := replication.CheckPublication(ctx, conn, r.target); err != nil {
		return err
	}
	info, err := replication.CheckSlot(ctx, conn, r.target.Slot)
	r.metrics.slotRead(info)
	// An invalidated slot goes on to START_REPLICATION, whose error (the
	// server's message and DETAIL) explainInvalidSlot explains.
	if err != nil && !errors.Is(err, replication.ErrSlotInvalidated) {
		return err
	}
	if r.cfg.Postgres.FailoverSlot {
		if err := replication.CheckFailoverSlot(ctx, conn, r.target.Slot); err != nil {
			return err
		}
	}
	if !r.target.TableLess {
		if r.shape, err = lookupOutbox(ctx, conn, r.cfg); err != nil {
			return err
		}
	}
	if r.target.Outbox.Columns.Has(layout.SentAt) {
		if r.sentStmt, err = sentat.Check(ctx, conn, r.target.Outbox); err != nil {
			return err
		}
	}
	if err := store.Check(ctx, conn, r.tables, r.cfg.Relay.DeadLetters() || len(r.cfg.Postgres.MessageKeys) > 0); err != nil {
		return err
	}
	return r.checkRetention(ctx, conn)
}

// slotState is what a relay holding the slot reads of it.
type slotState struct {
	confirmed pglogrepl.LSN
	progress  map[string]store.Position
	adopted   []uint32 // adoptedXids
}

func (r *Relay) readState(ctx context.Context) (slotState, error) {
	conn, err := pgconnect.Connect(ctx, r.cfg.Postgres.URL)
	if err != nil {
		return slotState{}, restart{err}
	}
	defer conn.Close(context.Background())
	info, err := replication.CheckSlot(ctx, conn, r.target.Slot)
	if err != nil {
		return slotState{}, err
	}
	progress, err := store.LoadProgress(ctx, conn, r.tables)
	if err != nil {
		return slotState{}, restart{err}
	}
	for name, p := range progress {
		r.log.Info().Str("sink", name).Str("commit_lsn", p.CommitLSN.String()).Str("lsn", p.LSN.String()).Uint32("seq", p.Seq).
			Msg("sink progress loaded; messages up to it are not sent to this sink again")
	}
	adopted, err := adoptedXids(ctx, conn, r.cfg, r.log)
	if err != nil {
		return slotState{}, err
	}
	return slotState{confirmed: info.ConfirmedFlush, progress: progress, adopted: adopted}, nil
}

// adoptedXids returns the transactions whose adopt messages are rows
// (store.LoadAdopted; an empty slice for none), or nil, which takes them
// from any transaction, when the adopt table does not exist: an outbox
// set up by a walpost before it, whose pending adopt messages must not be
// dropped. That is logged, with the way to close it (cdc init).
func adoptedXids(ctx context.Context, conn *pgx.Conn, cfg *config.Config, log zerolog.Logger) ([]uint32, error) {
	if cfg.Postgres.TableLess() {
		return nil, nil
	}
	xids, err := store.LoadAdopted(ctx, conn, store.TablesOf(cfg))
	switch {
	case errors.Is(err, store.ErrNoAdoptTable):
		log.Warn().Str("table", cfg.Postgres.AdoptTable).Msg("postgres.adopt_table does not exist: adopt messages are taken from any transaction, " +
			"and any role could forge an outbox row with one; run cdc init (as the table's owner) to create it, once the rows of an earlier cdc init --adopt are delivered")
		return nil, nil
	case err != nil:
		return nil, err
	case xids == nil:
		xids = []uint32{}
	}
	return xids, nil
}

// sentAtInterval is how often acknowledged rows are marked sent
// (columns.sent_at): it delays the slot's confirmation, not delivery.
// sentAtFlushTimeout bounds the last marking at shutdown.
const (
	sentAtInterval     = 100 * time.Millisecond
	sentAtFlushTimeout = 5 * time.Second
)

// sinkOpenTimeout bounds opening the sinks while the slot is held but not
// yet read (the server ends a replication connection that stays silent
// for wal_sender_timeout, 60 s by default).
const sinkOpenTimeout = 30 * time.Second

func (r *Relay) openSinks(ctx context.Context) ([]publish.Sink, error) {
	ctx, cancel := context.WithTimeout(ctx, sinkOpenTimeout)
	defer cancel()
	sinks := make([]publish.Sink, 0, len(r.openers))
	for _, open := range r.openers {
		s, err := open(ctx)
		if err != nil {
			r.closeSinks(sinks)
			return nil, err
		}
		sinks = append(sinks, s)
	}
	return sinks, nil
}

// closeSinks closes sinks in reverse order, logging failures.
func (r *Relay) closeSinks(sinks []publish.Sink) {
	for i := len(sinks) - 1; i >= 0; i-- {
		if err := sinks[i].Close(); err != nil {
			r.log.Warn().Err(err).Str("sink", sinks[i].Name()).Msg("closing sink")
		}
	}
}

// shutdown is one cycle's shutdown protocol (see the package doc), in one
// place:
//   - read is live while the stream may read: it ends when the run's
//     context ends, when a stage fails (the errgroup's context), or when
//     the pipeline stops at a bad row or a protocol error (stopReading);
//   - sinks is live while the runners may publish: it ends when a stage
//     fails, or relay.shutdown_timeout after the run's context ended;
//   - drained is closed once every runner returned: the stream then sends
//     its final status, the progress store its last positions.
type shutdown struct {
	read        context.Context
	stopReading context.CancelFunc
	sinks       context.Context
	drained     chan struct{}
	timeout     time.Duration
	release     []func() bool
	cancels     []context.CancelFunc
}

func newShutdown(ctx, gctx context.Context, timeout time.Duration, drained chan struct{}) *shutdown {
	sd := &shutdown{drained: drained, timeout: timeout}
	sd.read, sd.stopReading = context.WithCancel(gctx)
	var cancelSinks context.CancelFunc
	sd.sinks, cancelSinks = context.WithCancel(gctx)
	sd.cancels = []context.CancelFunc{sd.stopReading, cancelSinks}
	sd.release = []func() bool{
		context.AfterFunc(ctx, sd.stopReading),
		context.AfterFunc(ctx, func() { time.AfterFunc(timeout, cancelSinks) }),
	}
	return sd
}

// stopAndDrain stops reading, drops what the stream still hands on, and
// waits (at most the shutdown timeout) until the sinks drained what came
// before: everything before a bad row is delivered and confirmed.
func (sd *shutdown) stopAndDrain(events <-chan []replication.Event) {
	sd.stopReading()
	for range events {
	}
	select {
	case <-sd.drained:
	case <-time.After(sd.timeout):
	}
}

func (sd *shutdown) close() {
	for _, f := range sd.release {
		f()
	}
	for _, f := range sd.cancels {
		f()
	}
}

// streamCycle runs the pipeline on a held slot until ctx ends or a stage
// fails: the stream, the heartbeat, the pipeline, one runner per sink and
// the progress store, under one errgroup.
func (r *Relay) streamCycle(ctx context.Context, stream *replication.Stream, tracker *checkpoint.Tracker, marker *sentat.Marker,
	drained chan struct{}, sinks []publish.Sink, loaded map[string]store.Position) error {
	cfg := r.cfg
	window := publish.NewWindow(cfg.Relay.WindowMessages, cfg.Relay.WindowBytes)
	g, gctx := errgroup.WithContext(context.Background())
	sd := newShutdown(ctx, gctx, cfg.Relay.ShutdownTimeout.D(), drained)
	defer sd.close()
	r.setStream(stream, window, true)
	defer r.setStream(stream, window, false)
	r.metrics.watch(tracker, window, stream)
	defer r.metrics.cycleEnded()

	// Batches the stream read but the pipeline has not taken: at most
	// 256 KiB of message data each (replication's maxBatchBytes, or one
	// larger message), so this bounds memory outside the window to about
	// 16 MiB. Fewer slots slow a catch-up (the stream and the pipeline
	// take turns more often): 8 cost ~15% of its rate.
	events := make(chan []replication.Event, 64)
	p := r.newPipeline(tracker, window, len(sinks), loaded)
	p.marker = marker
	defer p.parked.Close()
	progress := store.NewProgress(cfg.Postgres.URL, r.tables, loaded, r.log)

	g.Go(func() error { return progress.Run(sd.read, 250*time.Millisecond, drained) })
	if marker != nil {
		g.Go(func() error { return marker.Run(sd.read, sentAtInterval) })
	}
	if job := r.retention; job != nil {
		g.Go(func() error { return job.Run(sd.read) }) // off the hot path; never stops the relay
	}
	if !r.target.TableLess {
		w := &watcher{r: r, tracker: tracker, p: p, shape: r.shape, started: time.Now()}
		// What covers the outbox now is recorded before anything streams;
		// then the watcher runs off the hot path and never stops the relay.
		w.first(ctx)
		g.Go(func() error { return w.Run(sd.read) })
	}
	g.Go(func() error { return stream.Run(sd.read, gctx, events) })
	g.Go(func() error {
		return replication.RunHeartbeat(sd.read, cfg.Postgres.URL, cfg.Postgres.HeartbeatInterval.D(), stream, r.log)
	})
	g.Go(func() error {
		err := p.run(gctx, events) // closes the sinks' channels
		var stop *stopAtRow
		if errors.As(err, &stop) || errors.Is(err, decoder.ErrProtocol) {
			sd.stopAndDrain(events)
		}
		return err
	})
	var runners sync.WaitGroup
	for i, s := range sinks {
		runner, done := r.runner(s, p.sinks[i], tracker, window, progress)
		defer done()
		runners.Add(1)
		g.Go(func() error {
			defer runners.Done()
			return r.runSink(ctx, gctx, sd, runner, s.Name(), window)
		})
	}
	go func() {
		runners.Wait()
		if marker != nil {
			marker.Flush(sentAtFlushTimeout) // before the stream's last status
		}
		close(drained)
	}()

	err := g.Wait()
	r.log.Info().Str("slot", cfg.Postgres.Slot).Str("confirmed", tracker.Confirmed().String()).Msg("relay stopped")
	return r.cycleError(err, tracker.Confirmed())
}

// newPipeline builds the stage between the stream and n sinks, with the
// positions each sink acknowledged before (loaded).
func (r *Relay) newPipeline(tracker *checkpoint.Tracker, window *publish.Window, n int, loaded map[string]store.Position) *pipeline {
	cfg := r.cfg
	p := &pipeline{dec: newDecoder(cfg), tracker: tracker, window: window,
		sinks: make([]chan []publish.Delivery, n), routes: cfg.Sinks, metrics: r.metrics, log: r.log,
		parked: store.NewDeadLetter(cfg.Postgres.URL, r.tables), park: cfg.Relay.OnInvalid == config.DeadLetter,
		tableLess: cfg.Postgres.TableLess()}
	if r.adopted != nil {
		p.dec.AdoptFrom(r.adopted)
	}
	for i := range p.sinks {
		p.sinks[i] = make(chan []publish.Delivery, 256)
	}
	p.fills = make(chan *fill)
	if r.shape.oid != 0 {
		p.dec.SetOutbox(r.shape.oid, r.shape.cols)
	}
	for _, s := range cfg.Sinks {
		p.skip = append(p.skip, loaded[s.Name])
	}
	return p
}

// newDecoder returns the decoder of cfg's outbox, which also reads the
// rows `cdc init --adopt` emitted for its slot; for a table-less outbox,
// the decoder of its envelopes.
func newDecoder(cfg *config.Config) *decoder.Decoder {
	d := decoder.New(cfg.Outbox())
	if cfg.Postgres.TableLess() {
		d.AcceptMessages(cfg.Postgres.MessagePrefix)
		if len(cfg.Postgres.MessageKeys) > 0 {
			keys := make([][]byte, len(cfg.Postgres.MessageKeys))
			for i, k := range cfg.Postgres.MessageKeys {
				keys[i] = []byte(k)
			}
			d.RequireSignature(keys)
		}
		return d
	}
	d.AcceptAdopted(decoder.AdoptPrefix(cfg.Postgres.Slot))
	return d
}

// ErrDrainCut is returned by Run when relay.shutdown_timeout ended the
// drain after its context ended: the relay stopped as asked, with
// deliveries in flight that the next run sends again (`cdc run` exits 3,
// docs/design.md "Shutdown").
var ErrDrainCut = errors.New("relay: relay.shutdown_timeout cut the drain")

// runSink runs one sink's runner until its channel is drained, and names
// what went wrong: a drain cut short by relay.shutdown_timeout, or the
// sink's own error.
func (r *Relay) runSink(ctx, gctx context.Context, sd *shutdown, runner *publish.Runner, name string, window *publish.Window) error {
	err := runner.Run(sd.sinks)
	switch {
	case err == nil:
		return nil
	case sd.sinks.Err() != nil && gctx.Err() == nil && ctx.Err() != nil:
		n, _ := window.InFlight()
		return fmt.Errorf("%w: sink %s had not drained after %v; nothing is lost, the slot is confirmed up to what every sink acknowledged: %d deliveries in flight will be sent again after restart",
			ErrDrainCut, name, sd.timeout, n)
	}
	return fmt.Errorf("sink %s: %w", name, err)
}

// cycleError turns the error a cycle's stages ended with into Run's: what
// to tell the operator of a bad row, and which errors start a new cycle.
func (r *Relay) cycleError(err error, confirmed pglogrepl.LSN) error {
	var stop *stopAtRow
	switch {
	case errors.As(err, &stop):
		return r.explainStop(stop, confirmed)
	case errors.Is(err, decoder.ErrProtocol):
		return restart{fmt.Errorf("%w; reconnecting from the confirmed position %s", err, confirmed)}
	case errors.Is(err, replication.ErrSlotLost):
		return restart{err}
	case publicationGone(err):
		return r.explainPublicationGone(err)
	}
	return err
}

// runner builds the runner of one sink; done releases what it holds once
// the run is over.
func (r *Relay) runner(s publish.Sink, in chan []publish.Delivery, tracker *checkpoint.Tracker, window *publish.Window,
	progress *store.Progress) (runner *publish.Runner, done func()) {
	cfg := r.cfg
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
		progress.Acked(sinkName, store.PositionOf(last))
		if sent {
			published.Add(float64(len(batch)))
		}
	}
	done = func() {}
	var refusedFn func(context.Context, publish.Delivery, error) error
	if cfg.Relay.OnRefused == config.DeadLetter {
		dead := store.NewDeadLetter(cfg.Postgres.URL, r.tables)
		done = dead.Close
		refused := r.metrics.refused.WithLabelValues(sinkName)
		refusedFn = func(ctx context.Context, d publish.Delivery, cause error) error {
			if err := dead.ParkRefused(ctx, sinkName, d.Msg, cause); err != nil {
				return fmt.Errorf("%w; the refusal: %v", err, cause)
			}
			refused.Inc()
			sinkLog.Error().Str("msg_id", d.Msg.ID).Str("lsn", d.Msg.LSN.String()).Uint32("seq", d.Msg.Seq).Str("commit_lsn", d.Msg.CommitLSN.String()).
				Str("type", d.Msg.Type).Str("error", cause.Error()).
				Msg("message refused by the sink for good; parked in the dead-letter table; going on")
			settle([]publish.Delivery{d}, false)
			return nil
		}
	}
	return publish.NewRunner(s, in, publish.RunnerOptions{
		BatchSize:       cfg.Relay.BatchSize,
		MaxBackoff:      cfg.Relay.RetryBackoff.D(),
		Ack:             func(batch []publish.Delivery) { settle(batch, true) },
		Failing:         func(f bool) { r.metrics.setFailing(sinkName, f) },
		Refused:         refusedFn,
		RefusedAttempts: cfg.Relay.RefusedAttempts,
		Log:             sinkLog,
	}), done
}

// stopAtRow is the pipeline's error for a row it cannot map and may not
// park: everything before it is delivered and confirmed, nothing after.
type stopAtRow struct{ err *decoder.Error }

func (e *stopAtRow) Error() string { return e.err.Error() }
func (e *stopAtRow) Unwrap() error { return e.err }

// explainStop tells the operator where the slot stands (read from the
// server: the slot's own confirmed position) and the ways past the row.
func (r *Relay) explainStop(stop *stopAtRow, tracked pglogrepl.LSN) error {
	cfg := r.cfg
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	slotAt := tracked.String() + " (as last sent to the server)"
	if conn, err := pgconnect.Connect(ctx, cfg.Postgres.URL); err == nil {
		if info, err := replication.ReadSlot(ctx, conn, cfg.Postgres.Slot); err == nil && info.Exists {
			slotAt = info.ConfirmedFlush.String()
		}
		conn.Close(context.Background())
	}
	de := stop.err
	if de.Table {
		return fmt.Errorf("%w; the slot %s is confirmed up to %s, before this message's transaction. "+
			"The stream carries each row with the table's columns as they were when it was written: if columns: in the config is wrong, fix it and restart. "+
			"If the table changed since (a column renamed, dropped or retyped), changing it now does not change the rows written before: "+
			"stop every relay on the slot, make the table and columns: match, and run: cdc resync --config %s "+
			"(it relays the rows committed since the slot's confirmed position from the table and moves the slot past them); then start cdc run again",
			de, cfg.Postgres.Slot, slotAt, r.ConfigPath)
	}
	return fmt.Errorf("%w; relay.on_invalid is stop: everything before this message was delivered, nothing after it, and slot %s is confirmed up to %s. "+
		"A restart stops here again. To go past this one message, stop every relay on the slot and run: cdc skip --config %s --lsn %s "+
		"(it parks the message in %s and the next run goes on after it); or set relay.on_invalid: dead_letter to park such rows and go on",
		de, cfg.Postgres.Slot, slotAt, r.ConfigPath, store.FormatAt(de.LSN, de.Seq), cfg.Postgres.DeadLetterTable)
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
	skip    []store.Position  // per sink: what it acknowledged before a restart
	parked  *store.DeadLetter // rows parked by on_invalid: dead_letter or cdc skip
	park    bool              // relay.on_invalid: dead_letter
	txn     *checkpoint.Txn
	targets []int
	marker  *sentat.Marker // columns.sent_at, nil when not mapped
	// tableLess: postgres.source: messages (a forged envelope is parked;
	// a forged adopt message, of an outbox table, ignored).
	tableLess bool
	ids       []string // the open transaction's message ids, for marker
	xid       uint32   // the open transaction's id, for marker

	// The publication or the table changing under the relay (gap.go).
	foreign map[uint32]bool // relations that are not the outbox, reported
	carried carried         // the last ids the stream carried
	pos     position        // the last commit or progress point handled
	fills   chan *fill      // rows read from the table, to relay unless carried
	pending *fill           // a fill waiting for the open transaction's end
}

func (p *pipeline) run(ctx context.Context, events <-chan []replication.Event) error {
	defer func() {
		for _, c := range p.sinks {
			close(c)
		}
	}()
	p.out = make([][]publish.Delivery, len(p.sinks))
	for {
		fills := p.fills
		if p.pending != nil {
			fills = nil
		}
		var batch []replication.Event
		select {
		case b, ok := <-events:
			if !ok {
				return nil
			}
			batch = b
		case f := <-fills:
			p.pending = f
		}
		for _, ev := range batch {
			switch ev.Kind {
			case replication.Reset:
				p.dec.Reset()
				p.tracker.Abandon()
				p.txn, p.ids = nil, nil
			case replication.Keepalive:
				if !p.dec.InTransaction() {
					p.tracker.Progress(ev.LSN)
					p.pos.raise(ev.LSN)
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
		if p.pending != nil && p.txn == nil {
			if err := p.doFill(ctx, p.pending); err != nil {
				return err
			}
			p.pending = nil
		}
	}
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
	// The event's data is the pipeline's (replication.Event.Data): a large
	// payload stays in it instead of being copied.
	e, err := p.dec.DecodeOwned(ev.LSN, ev.Data)
	if err != nil {
		var de *decoder.Error
		switch {
		case !errors.As(err, &de):
			return err
		case de.Table:
			// Parking would take every row of the table: stop whatever
			// relay.on_invalid says.
			return &stopAtRow{de}
		case de.Forged && !p.tableLess:
			// A forged adopt message: not a row at all (the rows are in
			// the table); ignored, loudly.
			p.metrics.forged.WithLabelValues("adopt").Inc()
			p.log.Error().Str("lsn", de.LSN.String()).Str("commit_lsn", de.CommitLSN.String()).Str("error", de.Err.Error()).
				Msg("forged adopt message ignored: not published")
			return nil
		case de.Forged:
			// Whoever wrote it may not publish, and must not stop the
			// relay either: parked whatever relay.on_invalid says.
			if err := p.parked.Park(ctx, de, ""); err != nil {
				return err
			}
			p.metrics.forged.WithLabelValues("envelope").Inc()
			p.log.Error().Str("msg_id", de.ID).Str("lsn", de.LSN.String()).Str("commit_lsn", de.CommitLSN.String()).
				Str("error", de.Err.Error()).Msg("message not signed with a key of postgres.message_keys: parked in the dead-letter table, not published; going on")
			return nil
		case !p.park:
			parked, lerr := p.parked.Parked(ctx, de.LSN, de.Seq)
			if lerr != nil {
				return fmt.Errorf("%w (and looking it up in the dead-letter table failed: %v)", de, lerr)
			}
			if !parked {
				return &stopAtRow{de}
			}
			p.log.Warn().Str("msg_id", de.ID).Str("lsn", de.LSN.String()).Uint32("seq", de.Seq).Str("error", de.Err.Error()).
				Msg("bad outbox row parked by cdc skip; going past it")
			return nil
		}
		if err := p.parked.Park(ctx, de, ""); err != nil {
			return err
		}
		p.metrics.deadLettered.Inc()
		p.log.Error().Str("msg_id", de.ID).Str("lsn", de.LSN.String()).Uint32("seq", de.Seq).Str("commit_lsn", de.CommitLSN.String()).
			Str("error", de.Err.Error()).Msg("bad outbox row parked in the dead-letter table; going on")
		return nil
	}
	if e.Rel != nil {
		p.relationSeen(e.Rel)
	}
	switch e.Kind {
	case decoder.Begin:
		p.txn, p.xid = p.tracker.Begin(), e.Xid
	case decoder.Commit:
		if p.txn == nil {
			return fmt.Errorf("%w: commit at %s without begin", decoder.ErrProtocol, e.LSN)
		}
		if p.marker != nil {
			if p.marker.Full(len(p.ids)) {
				// Hand on what is gathered: its acks let the marking catch up.
				if err := p.flush(ctx); err != nil {
					return err
				}
			}
			if err := p.marker.Add(ctx, e.LSN, p.xid, p.ids); err != nil { // before the tracker may confirm it
				return err
			}
			p.ids = nil
		}
		p.tracker.Commit(p.txn, e.LSN)
		p.txn = nil
		p.pos.raise(e.LSN)
	case decoder.Progress:
		p.tracker.Progress(e.LSN)
		p.pos.raise(e.LSN)
	case decoder.Row:
		p.metrics.decoded.Inc()
		p.carried.add(e.Msg.ID)
		if p.marker != nil {
			p.ids = append(p.ids, e.Msg.ID)
		}
		p.targets = p.targets[:0]
		for i := range p.routes {
			if p.routes[i].Route.Matches(e.Msg.Type) && !p.skip[i].Covers(e.Msg) {
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
