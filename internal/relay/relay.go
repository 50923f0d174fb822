// Package relay joins the pipeline's stages:
//
//	replication.Stream ──events──► pipeline.Pipeline (decoder, checkpoint, routing, window)
//	     ▲                                 │ one channel per sink
//	     │ confirmed LSN                   ▼
//	checkpoint.Tracker ◄──acks── publish.Runner × sinks (pipeline.Settler)
//
// The stages are in their own packages; relay runs them: cycles, shutdown
// (shutdown.go) and wiring (config, state tables and metrics in; the
// pipeline's interfaces filled with store.DeadLetter, sentat.Marker,
// store.Progress and the Prometheus counters). Each channel is written and
// closed by one goroutine; all run under one errgroup, so any stage's
// error stops the others. The confirmed LSN only ever comes from the
// Tracker, which only moves past a transaction once every sink
// acknowledged every message of it.
//
// A run is a sequence of cycles. A cycle checks the server (read-only:
// `cdc run` creates nothing), acquires the slot (a standby waits here, with
// no sink open), and only then reads what it needs to know of the slot's
// state (its confirmed position, each sink's progress), opens the sinks,
// checks them (publish.Starter: a capability the broker lacks stops the
// run here, before it streams), moves the progress of a sink that keeps its own at the destination
// (publish.Resumer) to where the destination says it is, and streams. A cycle ends, and the next one starts after a backoff,
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
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/walpost/walpost/internal/backoff"
	"github.com/walpost/walpost/internal/checkpoint"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/coverage"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/explain"
	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/outboxdb"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/pipeline"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/redact"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/retention"
	"github.com/walpost/walpost/internal/sentat"
	"github.com/walpost/walpost/internal/store"
	"github.com/walpost/walpost/internal/tracing"
)

// Relay is one configured relay.
type Relay struct {
	cfg     *config.Config
	log     zerolog.Logger
	openers []publish.Opener
	target  replication.Target
	tables  store.Tables
	metrics *Metrics

	// ConfigPath names the configuration file in the instructions the
	// relay gives an operator (e.g. the cdc skip command line).
	ConfigPath string
	// Gate, when set, bounds the slots this process holds at once (a
	// fleet of sources, internal/fleet); the stream enters it before each
	// attempt to take the slot. [fleet hook]
	Gate replication.Gate
	// Tracing, when set, records each delivery as a publish span
	// (tracing:; internal/tracing). Nil: tracing off, nothing recorded.
	Tracing *tracing.Provider

	// emitWarned: the table-less outbox's outboxdb.EmitRisk was logged
	// (once a run); topologyLogged: decoding from a standby was. The only
	// fields a cycle sets; what it finds is its cycleState.
	emitWarned, topologyLogged bool

	mu     sync.Mutex
	stream *replication.Stream
	window *pipeline.Window
	ready  bool
	lent   []*publish.Lent // the streaming cycle's sinks, lent (Lent)
	// failing: the sinks whose last attempt failed, with its error (for
	// the log line at SIGINT/SIGTERM: logDrain).
	failing map[string]string
}

// New validates the sinks' settings. It does no I/O: no sink is opened
// and nothing connects until Run holds the slot.
func New(cfg *config.Config, log zerolog.Logger, metrics *Metrics) (*Relay, error) {
	r := &Relay{cfg: cfg, log: log, target: outboxdb.Target(cfg), tables: store.TablesOf(cfg), metrics: metrics, ConfigPath: "cdc.yaml"}
	if r.metrics == nil {
		r.metrics = NewMetrics(nil)
	}
	var names, claimChecked []string
	var errs []error // every sink's mistake at once
	for i := range cfg.Sinks {
		open, err := prepareSink(cfg, i, log)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.openers = append(r.openers, open)
		names = append(names, cfg.Sinks[i].Name)
		if cfg.Sinks[i].ClaimCheck != nil {
			claimChecked = append(claimChecked, cfg.Sinks[i].Name)
		}
	}
	switch len(errs) {
	case 0:
	case 1:
		return nil, errs[0]
	default:
		return nil, config.Errors(errs)
	}
	r.metrics.addSinks(names)
	r.metrics.addClaimChecks(claimChecked)
	return r, nil
}

// prepareSink checks sinks[i]'s settings and returns its Opener. A sink with
// a ${VAR} left unresolved (config.LoadFor: a command that does not use
// the sinks) is not checked, and its Opener fails.
func prepareSink(cfg *config.Config, i int, log zerolog.Logger) (publish.Opener, error) {
	at := fmt.Sprintf("sinks[%d]", i)
	if !cfg.UnresolvedUnder(at) {
		return publish.Prepare(i, &cfg.Sinks[i], log)
	}
	return func(context.Context) (publish.Sink, error) {
		return nil, fmt.Errorf("%s (%s): a ${VAR} of its settings is not set", at, cfg.Sinks[i].Name)
	}, nil
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

func (r *Relay) setStream(s *replication.Stream, w *pipeline.Window, ready bool) {
	r.mu.Lock()
	r.stream, r.window, r.ready = s, w, ready
	r.mu.Unlock()
}

// Run relays until ctx ends (graceful: returns nil once drained and
// confirmed) or a stage fails for good (returns its error). See the
// package documentation for the cycles it runs.
func (r *Relay) Run(ctx context.Context) error {
	retry := backoff.New(replication.BackoffStart, r.cfg.Postgres.ReconnectBackoff.D())
	held := false // a cycle streamed: the slot existed where this process streamed
	for {
		end := r.cycle(ctx)
		held = held || end.streamed
		then, err := r.onCycleEnd(end, held) // errpolicy.go
		if then == stop {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if end.streamed {
			retry.Reset()
		}
		wait := retry.Next()
		if then == restartNow {
			wait = 0 // wait for the slot at once, as a standby
			r.log.Warn().Err(err).Str("slot", r.cfg.Postgres.Slot).Msg("sinks closed; waiting for the slot again")
		} else {
			r.log.Warn().Err(err).Dur("retry_in_ms", wait).Msg("relay restarting")
		}
		if !backoff.Sleep(ctx, wait) {
			return nil
		}
	}
}

// Lent returns the sinks of the cycle streaming now, in the order of the
// configuration, lent for publishing beside their runners (publish.Lent:
// the console's resends); nil when none streams. A sink that keeps its
// progress at the destination (publish.Resumer: the exactly-once Kafka
// sink) is not lent (nil): a resend opens its own.
func (r *Relay) Lent() []publish.Sink {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lent == nil {
		return nil
	}
	out := make([]publish.Sink, len(r.lent))
	for i, l := range r.lent {
		if l != nil {
			out[i] = l
		}
	}
	return out
}

// lend lends the cycle's sinks (Lent) until retire.
func (r *Relay) lend(sinks []publish.Sink) []*publish.Lent {
	lent := make([]*publish.Lent, len(sinks))
	for i, s := range sinks {
		if _, resumes := s.(publish.Resumer); !resumes {
			published := r.metrics.published.WithLabelValues(s.Name())
			lent[i] = publish.Lend(s, func(n int) { published.Add(float64(n)) })
		}
	}
	r.mu.Lock()
	r.lent = lent
	r.mu.Unlock()
	return lent
}

// retire takes the lent sinks back before they are closed.
func (r *Relay) retire(lent []*publish.Lent) {
	r.mu.Lock()
	r.lent = nil
	r.mu.Unlock()
	for _, l := range lent {
		if l != nil {
			l.Retire()
		}
	}
}

// cycleState is what one cycle found before it streams: what the check
// read of the server and what the relay holding the slot read of it
// (readState). streamCycle runs on it; nothing of it stays on the Relay.
type cycleState struct {
	// stateURL is where the cycle writes its state: postgres.primary_url
	// when the slot is read on a standby, else postgres.url (also when
	// the standby was promoted).
	stateURL string
	// sentStmt is the UPDATE that fills in columns.sent_at, "" when it is
	// not mapped.
	sentStmt string
	// retention deletes delivered rows (relay.retention), nil when off.
	retention *retention.Job
	// shape is the outbox table's OID, columns and time column.
	shape outboxdb.Shape
	slotState
}

// cycle runs one cycle: check, acquire, read the slot's state, open the
// sinks, stream; it says how it ended. An error while ctx ends is a clean
// stop (nil).
func (r *Relay) cycle(ctx context.Context) cycleEnd {
	streamed, confirmed, err := r.runCycle(ctx)
	if err != nil && ctx.Err() != nil && !streamed {
		err = nil // SIGINT/SIGTERM before streaming: a clean stop, nothing read
	}
	return cycleEnd{streamed: streamed, confirmed: confirmed, err: err}
}

// runCycle is cycle's work.
func (r *Relay) runCycle(ctx context.Context) (streamed bool, confirmed pglogrepl.LSN, err error) {
	cfg := r.cfg
	connecting := r.log.Info().Str("postgres", pgconnect.DescribeURL(cfg.Postgres.URL)).Str("slot", cfg.Postgres.Slot)
	if cfg.Postgres.FromStandby() {
		connecting = connecting.Str("primary", pgconnect.DescribeURL(cfg.Postgres.PrimaryURL))
	}
	connecting.Msg("connecting")
	cs, err := r.check(ctx)
	if err != nil {
		return false, 0, err
	}
	tracker := checkpoint.New(0)
	drained := make(chan struct{}) // closed once every sink drained after the stream stopped
	var confirmer replication.Confirmer = tracker
	var marker *sentat.Marker
	if cs.sentStmt != "" {
		marker = sentat.New(cs.stateURL, cs.sentStmt, tracker, r.log)
		confirmer = marker // the slot waits for rows to be marked sent
	}
	stream := replication.NewStream(replication.StreamOptions{
		URL: cfg.Postgres.URL, Slot: cfg.Postgres.Slot, Publication: cfg.Postgres.Publication,
		StatusInterval: cfg.Postgres.StatusInterval.D(), MaxBackoff: cfg.Postgres.ReconnectBackoff.D(),
		SlotPoll: cfg.Postgres.StandbyPoll.D(), ReceiveBuffer: cfg.Postgres.ReceiveBufferBytes(),
		MaxMessageBytes: cfg.Postgres.MaxMessageBytes, OwnPrefixes: outboxdb.OwnPrefixes(cfg), Drained: drained, Log: r.log,
		Gate: r.Gate, // [fleet hook]
	}, confirmer)
	r.setStream(stream, nil, false)
	if err := stream.Acquire(ctx); err != nil {
		return false, 0, err
	}
	// The slot is ours: what the relay knows of its state, it reads now.
	if cs.slotState, err = r.readState(ctx, cs.stateURL); err != nil {
		stream.Release()
		return false, 0, err
	}
	tracker.Progress(cs.confirmed)
	opening := time.Now()
	sinks, err := r.openSinks(ctx)
	if err != nil {
		stream.Release()
		if errors.Is(err, context.DeadlineExceeded) {
			// A sink waited too long (the file sink's lock, held by an
			// instance that lost the slot but has not noticed yet): let
			// go of the slot and try again.
			err = transient{err}
		}
		return false, 0, err
	}
	defer r.closeSinks(sinks)
	if err := r.startSinks(ctx, sinks, opening.Add(sinkOpenTimeout)); err != nil {
		stream.Release()
		return false, 0, err // ctx ended: a clean stop (cycle)
	}
	if err := r.resumeSinks(ctx, sinks, &cs.slotState); err != nil {
		stream.Release()
		return false, 0, err
	}
	err = r.streamCycle(ctx, stream, tracker, marker, drained, sinks, &cs)
	return true, tracker.Confirmed(), err
}

// check verifies, read-only, what the relay needs of the server, and
// returns what the cycle needs of it (all but slotState). Failing
// to connect is worth another cycle (the server may be starting), unless
// the server refused the role or database (pgconnect.Refused); a failed
// check is not.
//
// With postgres.primary_url (decoding from a standby), the slot, the
// publication and the outbox's definition are checked on the standby
// (postgres.url) and what the relay writes on the primary; the topology
// is checked first (replication.CheckTopology) and hot_standby_feedback
// off is a warning (replication.Topology.Cautions).
func (r *Relay) check(ctx context.Context) (cycleState, error) {
	var cs cycleState
	conns, err := replication.OpenConns(ctx, r.cfg.Postgres.URL, r.cfg.Postgres.PrimaryURL)
	if err != nil {
		// The server may be starting: a fault that passes, unless it
		// refused the role or the check failed (errpolicy.go).
		return cs, transient{err}
	}
	defer conns.Close()
	conn, state := conns.Slot, conns.State
	cs.stateURL = r.cfg.Postgres.URL
	if conns.Standby() {
		cs.stateURL = r.cfg.Postgres.PrimaryURL
	}
	if conns.Standby() || conns.Topology.Promoted {
		if !r.topologyLogged {
			r.topologyLogged = true
			r.log.Info().Str("topology", conns.Topology.Describe()).Msg("the slot is read on a standby (postgres.primary_url is set)")
		}
		for _, c := range conns.Topology.Cautions() { // each cycle: a setting may change
			r.log.Warn().Msg(c)
		}
	}
	if err := replication.CheckServer(ctx, conn, r.target); err != nil {
		return cs, err
	}
	if risk, err := outboxdb.EmitRisk(ctx, state, r.cfg); err != nil {
		return cs, err
	} else if risk != "" && !r.emitWarned {
		r.emitWarned = true
		r.log.Warn().Str("prefix", r.cfg.Postgres.MessagePrefix).Msg(risk)
	}
	if err := replication.CheckPublication(ctx, conn, r.target); err != nil {
		return cs, err
	}
	info, err := replication.CheckSlot(ctx, conn, r.target.Slot)
	r.metrics.slotRead(info)
	// An invalidated slot goes on to START_REPLICATION, whose error (the
	// server's message and DETAIL) explain.Run.InvalidSlot explains.
	if err != nil && !errors.Is(err, replication.ErrSlotInvalidated) {
		return cs, err
	}
	if r.cfg.Postgres.FailoverSlot {
		if err := replication.CheckFailoverSlot(ctx, conn, r.target.Slot); err != nil {
			return cs, err
		}
	}
	if !r.target.TableLess {
		if cs.shape, err = outboxdb.LookupOutbox(ctx, state, r.cfg); err != nil {
			return cs, err
		}
	}
	if r.target.Outbox.Columns.Has(layout.SentAt) {
		if cs.sentStmt, err = sentat.Check(ctx, state, r.target.Outbox); err != nil {
			return cs, err
		}
	}
	open, err := store.CheckOwners(ctx, state, r.tables, store.TrustOf(r.cfg))
	for _, o := range open {
		r.log.Warn().Str("schema", o.Schema).Msg(o.String())
	}
	if err != nil {
		return cs, err
	}
	if err := store.Check(ctx, state, r.tables, r.cfg.Relay.DeadLetters() || len(r.cfg.Postgres.MessageKeys) > 0); err != nil {
		return cs, err
	}
	cs.retention, err = r.checkRetention(ctx, state, cs.stateURL)
	return cs, err
}

// slotState is what a relay holding the slot reads of it.
type slotState struct {
	confirmed pglogrepl.LSN
	walEnd    pglogrepl.LSN // the server's WAL position once the slot was held (publish.ResumeOptions)
	progress  map[string]store.Position
	adopted   []uint32     // adoptedXids
	held      []store.Hold // store.ListHolds
}

// readState reads the slot's state, its position on postgres.url and the
// rest where the cycle writes its state (stateURL).
func (r *Relay) readState(ctx context.Context, stateURL string) (slotState, error) {
	conn, err := pgconnect.Connect(ctx, r.cfg.Postgres.URL)
	if err != nil {
		return slotState{}, transient{err}
	}
	defer conn.Close(context.Background())
	info, err := replication.CheckSlot(ctx, conn, r.target.Slot)
	if err != nil {
		return slotState{}, err
	}
	if stateURL != r.cfg.Postgres.URL { // the slot on the standby, the rest on the primary
		if conn, err = pgconnect.Connect(ctx, stateURL); err != nil {
			return slotState{}, transient{err}
		}
		defer conn.Close(context.Background())
	}
	progress, err := store.LoadProgress(ctx, conn, r.tables)
	if err != nil {
		return slotState{}, transient{err}
	}
	for name, p := range progress {
		r.log.Info().Str("sink", name).Str("commit_lsn", p.CommitLSN.String()).Str("lsn", p.LSN.String()).Uint32("seq", p.Seq).
			Msg("sink progress loaded; messages up to it are not sent to this sink again")
	}
	adopted, err := outboxdb.AdoptedXids(ctx, conn, r.cfg, r.log)
	if err != nil {
		return slotState{}, err
	}
	held, err := store.ListHolds(ctx, conn, r.tables)
	switch {
	case err != nil && (r.cfg.Relay.OnInvalid == config.HoldKey || r.cfg.Relay.OnRefused == config.HoldKey):
		return slotState{}, transient{err}
	case err != nil: // no hold_key policy: the role need not read the table
		r.log.Warn().Err(err).Msg("reading the held keys failed; going on without (relay.on_invalid and on_refused are not hold_key)")
	}
	for _, h := range held {
		r.log.Warn().Str("sink", h.Sink).Str("key", h.Key).Str("head", store.FormatAt(h.Head.LSN, h.Head.Seq)).
			Msg("key held behind a parked message: its messages are parked until cdc dead-letter resend or drop of that message")
	}
	return slotState{confirmed: info.ConfirmedFlush, walEnd: info.CurrentWAL, progress: progress, adopted: adopted, held: held}, nil
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

// startSinks runs each sink's start-up check (publish.Starter: it
// connects and checks what the configuration needs of the destination),
// so that a capability the broker lacks stops the relay here, before it
// streams, and not at the first message (docs/design.md, "Start-up
// checks"). A Permanent error stops the relay; any other (the broker
// cannot be reached now) is logged, and the sink's first Publish tries
// again, as before. Opening and checking share sinkOpenTimeout (until
// deadline): the slot is held and silent meanwhile.
func (r *Relay) startSinks(ctx context.Context, sinks []publish.Sink, deadline time.Time) error {
	sctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for _, s := range sinks {
		err := publish.Start(sctx, s)
		switch {
		case err == nil:
		case publish.IsPermanent(err):
			return err
		case ctx.Err() != nil:
			return ctx.Err() // SIGINT/SIGTERM: the caller stops cleanly
		default: // the timeout included: the sink's first Publish tries again
			r.log.Warn().Err(err).Str("sink", s.Name()).Msg("sink not reachable at start; its first publish tries again")
		}
	}
	return nil
}

// resumeSinks asks each sink that keeps its own progress at the
// destination (publish.Resumer: the kafka sink with exactly_once) where
// it is, and moves the sink's loaded position there when that is later
// than the progress table's: a message the destination holds from the
// sink is not sent to it again. A Permanent error stops the relay; any
// other starts a new cycle.
func (r *Relay) resumeSinks(ctx context.Context, sinks []publish.Sink, st *slotState) error {
	ctx, cancel := context.WithTimeout(ctx, sinkOpenTimeout)
	defer cancel()
	for _, s := range sinks {
		rs, ok := s.(publish.Resumer)
		if !ok {
			continue
		}
		res, err := rs.Resume(ctx, publish.ResumeOptions{Slot: r.target.Slot, WALEnd: st.walEnd})
		if err != nil {
			err = fmt.Errorf("resuming sink %s from its progress at the destination: %w", s.Name(), err)
			if publish.IsPermanent(err) {
				return err
			}
			return transient{err}
		}
		if res.Refused > 0 {
			r.metrics.forgedProgress.WithLabelValues(s.Name()).Add(float64(res.Refused))
		}
		if !res.Found {
			continue
		}
		pos := res.Pos
		at := &message.Message{CommitLSN: pos.CommitLSN, LSN: pos.LSN, Seq: pos.Seq}
		if cur, ok := st.progress[s.Name()]; ok && cur.Covers(at) {
			continue
		}
		if st.progress == nil {
			st.progress = map[string]store.Position{}
		}
		st.progress[s.Name()] = store.Position{CommitLSN: pos.CommitLSN, LSN: pos.LSN, Seq: pos.Seq}
		r.log.Info().Str("sink", s.Name()).Str("commit_lsn", pos.CommitLSN.String()).Str("lsn", pos.LSN.String()).Uint32("seq", pos.Seq).
			Msg("sink progress loaded from the destination (exactly_once); messages up to it are not sent to this sink again")
	}
	return nil
}

// closeSinks closes sinks in reverse order, logging failures.
func (r *Relay) closeSinks(sinks []publish.Sink) {
	for i := len(sinks) - 1; i >= 0; i-- {
		if err := sinks[i].Close(); err != nil {
			r.log.Warn().Err(err).Str("sink", sinks[i].Name()).Msg("closing sink")
		}
	}
}

// streamCycle runs the pipeline on a held slot until ctx ends or a stage
// fails: the stream, the heartbeat, the pipeline, one runner per sink and
// the progress store, under one errgroup.
func (r *Relay) streamCycle(ctx context.Context, stream *replication.Stream, tracker *checkpoint.Tracker, marker *sentat.Marker,
	drained chan struct{}, sinks []publish.Sink, cs *cycleState) error {
	cfg := r.cfg
	window := pipeline.NewWindow(cfg.Relay.WindowMessages, cfg.Relay.WindowBytes)
	g, gctx := errgroup.WithContext(context.Background())
	sd := newShutdown(ctx, gctx, cfg.Relay.ShutdownTimeout.D(), drained)
	defer sd.close()
	r.setStream(stream, window, true)
	defer r.setStream(stream, window, false)
	r.mu.Lock()
	r.failing = nil // this cycle's sinks
	r.mu.Unlock()
	defer context.AfterFunc(ctx, func() { r.logDrain(window) })()
	r.metrics.watch(tracker, window, stream)
	defer r.metrics.cycleEnded()
	lent := r.lend(sinks)
	defer r.retire(lent)

	// Batches the stream read but the pipeline has not taken: at most
	// 64 KiB of message data each (replication's maxBatchBytes, or one
	// larger message), so this bounds memory outside the window to about
	// 4 MiB. Fewer slots slow a catch-up, as the stream and the pipeline
	// take turns more often (see BENCHMARKS.md, "What each optimisation
	// bought").
	events := make(chan []replication.Event, 64)
	parked := store.NewDeadLetter(cs.stateURL, r.tables)
	defer parked.Close()
	relations := make(chan struct{}, 1) // a Relation message: the coverage watcher looks
	p := r.newPipeline(cs, tracker, window, marker, parked, relations)
	progress := store.NewProgress(cs.stateURL, r.tables, cs.progress, r.log)

	g.Go(func() error { return progress.Run(sd.read, 250*time.Millisecond, drained) })
	if marker != nil {
		g.Go(func() error { return marker.Run(sd.read, sentAtInterval) })
	}
	if job := cs.retention; job != nil {
		g.Go(func() error { return job.Run(sd.read) }) // off the hot path; never stops the relay
	}
	if !r.target.TableLess {
		w := coverage.New(coverage.Options{Config: cfg, URL: cs.stateURL, Target: r.target, Tables: r.tables,
			TimeColumn: cs.shape.TimeColumn, Pipeline: p, Tracker: tracker, Relations: relations,
			Metrics: r.metrics.coverage, Log: r.log})
		// What covers the outbox now is recorded before anything streams;
		// then the watcher runs off the hot path and never stops the relay.
		w.First(ctx)
		g.Go(func() error { return w.Run(sd.read) })
	}
	if cs.stateURL != cfg.Postgres.URL { // the slot on a standby
		g.Go(func() error { // docs/operations.md, "Decoding from a standby"
			if !replication.WatchPromotion(sd.read, cfg.Postgres.URL) {
				return nil
			}
			r.log.Warn().Str("slot", cfg.Postgres.Slot).Msg("the standby the slot is read on (postgres.url) was promoted; starting a new cycle, which reads the slot and writes the state on it")
			return ErrStandbyPromoted
		})
	}
	g.Go(func() error { return stream.Run(sd.read, gctx, events) })
	g.Go(func() error {
		// A standby writes no WAL: the heartbeat's message is written on
		// the primary and reaches the slot through the standby's replay.
		return replication.RunHeartbeat(sd.read, cs.stateURL, cfg.Postgres.HeartbeatInterval.D(), stream, r.log)
	})
	g.Go(func() error {
		err := p.Run(gctx, events) // closes the sinks' channels
		var stop *pipeline.StopAtRow
		if errors.As(err, &stop) || errors.Is(err, decoder.ErrProtocol) {
			sd.stopAndDrain(events)
		}
		return err
	})
	var runners sync.WaitGroup
	for i, s := range sinks {
		runner, done := r.runner(cs, s, lent[i], p.Out(i), tracker, window, progress)
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
	return err
}

// newPipeline builds the stage between the stream and the sinks, with the
// positions each sink acknowledged before (cs.progress); marker is nil
// when columns.sent_at is not mapped.
func (r *Relay) newPipeline(cs *cycleState, tracker *checkpoint.Tracker, window *pipeline.Window, marker *sentat.Marker,
	parked *store.DeadLetter, relations chan<- struct{}) *pipeline.Pipeline {
	cfg := r.cfg
	dec := outboxdb.NewDecoder(cfg)
	if cs.adopted != nil {
		dec.AdoptFrom(cs.adopted)
	}
	if cs.shape.OID != 0 {
		dec.SetOutbox(cs.shape.OID, cs.shape.Columns)
	}
	o := pipeline.Options{Decoder: dec, Tracker: tracker, Window: window, DeadLetters: parked,
		Invalid: policyOf(cfg.Relay.OnInvalid), TableLess: cfg.Postgres.TableLess(),
		HoldStore: parked, Holds: cs.held, // keys held before are held whatever the policy now
		OnExpired: cfg.Relay.OnExpired, Expired: parked,
		Metrics: r.metrics.pipelineMetrics(), Log: r.log,
		Relation: func() {
			select {
			case relations <- struct{}{}:
			default:
			}
		}}
	if marker != nil { // a nil *Marker is not a nil Marker
		o.Marker = marker
	}
	for _, s := range cfg.Sinks {
		o.Routes = append(o.Routes, s.Route)
		o.Acked = append(o.Acked, cs.progress[s.Name])
		o.SinkNames = append(o.SinkNames, s.Name)
	}
	return pipeline.New(o)
}

// policyOf is relay.on_invalid's or on_refused's word as the pipeline
// takes it: stop parks nothing, dead_letter parks, hold_key parks and
// holds the key.
func policyOf(p config.Policy) pipeline.Policy {
	switch {
	case p == config.HoldKey:
		return pipeline.HoldKey
	case p.Parks():
		return pipeline.Park
	}
	return pipeline.Stop
}

// explain is what the explanations of a stop need (internal/explain).
func (r *Relay) explain() explain.Run {
	return explain.Run{Config: r.cfg, ConfigPath: r.ConfigPath, Tables: r.tables, Target: r.target, SlotRead: r.metrics.slotRead}
}

// runner builds the runner of one sink, settling what it is done with
// (pipeline.Settler); done releases what it holds once the run is over.
func (r *Relay) runner(cs *cycleState, s publish.Sink, lent *publish.Lent, in <-chan []publish.Delivery, tracker *checkpoint.Tracker, window *pipeline.Window,
	progress *store.Progress) (runner *publish.Runner, done func()) {
	cfg := r.cfg
	sinkName := s.Name()
	sinkLog := r.log.With().Str("sink", sinkName).Logger()
	so := pipeline.SettlerOptions{Sink: sinkName, Tracker: tracker, Window: window, Progress: progress,
		Metrics: r.metrics.sinkMetrics(sinkName), Log: sinkLog}
	if cc, ok := s.(publish.ClaimChecked); ok {
		cc.SetClaimCheckMetrics(r.metrics.claimCheckMetrics(sinkName))
	}
	if sc, ok := s.(publish.Counted); ok {
		sc.SetSinkCounters(publish.SinkCounters{ReplaysDropped: r.metrics.guarded.WithLabelValues(sinkName),
			Reordered: r.metrics.reordered.WithLabelValues(sinkName)})
	}
	done = func() {}
	so.Refused = policyOf(cfg.Relay.OnRefused)
	hold := so.Refused == pipeline.HoldKey
	for _, h := range cs.held {
		hold = hold || h.Sink == sinkName // held before: held whatever the policy now
	}
	if so.Refused.Parks() || hold {
		dead := store.NewDeadLetter(cs.stateURL, r.tables)
		so.Refusals, done = dead, dead.Close
		if hold {
			so.HoldStore, so.Holds = dead, cs.held
		}
	}
	settler := pipeline.NewSettler(so)
	secrets := redact.NewSet(cfg.Secrets()...)
	opt := publish.RunnerOptions{
		BatchSize:  cfg.Relay.BatchSize,
		MaxBackoff: cfg.Relay.RetryBackoff.D(),
		Ack:        settler.Ack,
		Failing: func(f bool) {
			r.setFailing(sinkName, f, "")
			r.metrics.setFailing(sinkName, f)
			if !f {
				progress.Failing(sinkName, "")
			}
		},
		Failed: func(err error) {
			r.setFailing(sinkName, true, sinkError(secrets, err))
			progress.Failing(sinkName, sinkError(secrets, err))
		},
		RefusedAttempts: cfg.Relay.RefusedAttempts,
		Log:             sinkLog,
	}
	if lent != nil { // a nil *Lent is not a nil Locker
		opt.Lock = lent
	}
	if so.Refused.Parks() {
		opt.Refused = settler.Refused
	}
	if hold {
		opt.Hold = settler
	}
	for i := range cfg.Sinks {
		if cfg.Sinks[i].Name == sinkName {
			opt.Trace = r.Tracing.Sink(&cfg.Sinks[i], tracing.Relay) // nil when off
		}
	}
	return publish.NewRunner(s, in, opt), done
}
