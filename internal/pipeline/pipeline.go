package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/checkpoint"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/store"
)

// sinkBuffer is how many delivery slices (one per input batch) each sink's
// channel holds before the pipeline waits for the sink's runner.
const sinkBuffer = 256

// Options configures a Pipeline. Decoder, Tracker, Window and DeadLetters
// are required.
type Options struct {
	// Decoder decodes the stream's pgoutput messages; the caller sets it
	// up for the outbox (mapping, table OID, adopt or envelope prefix).
	Decoder *decoder.Decoder
	// Tracker is told every transaction, delivery and progress point, in
	// stream order; the sinks' settlers acknowledge into it.
	Tracker *checkpoint.Tracker
	// Window bounds the deliveries and bytes in flight: Run waits on it.
	Window *Window
	// Routes selects, per sink (in the sinks' order), the messages it
	// gets; there is one output channel per route.
	Routes []config.Route
	// Acked is, per sink, the position it acknowledged before this run
	// (the progress table): a message at or before it is not sent to that
	// sink again. A missing or zero entry skips nothing.
	Acked []store.Position
	// DeadLetters parks the rows the pipeline may not publish and answers
	// whether `cdc skip` parked one.
	DeadLetters DeadLetters
	// Invalid is relay.on_invalid: with Stop, Run stops at a bad row
	// with a *StopAtRow; with Park it parks the row and goes on; with
	// HoldKey the row is parked as the head of its ordering key, and
	// every later message of the key is parked behind it (HoldStore)
	// until the key is released.
	Invalid Policy
	// HoldStore parks by key: required with Invalid HoldKey or Holds.
	HoldStore HoldStore
	// Holds are the keys held for every sink when the run starts
	// (store.ListHolds, sink ""), held whatever Invalid is.
	Holds []store.Hold
	// TableLess is postgres.source: messages: a forged envelope is parked;
	// of an outbox table, a forged adopt message is ignored.
	TableLess bool
	// Marker, when set, is handed each transaction's message ids at its
	// commit, before the tracker (columns.sent_at).
	Marker Marker
	// OnExpired is relay.on_expired: what happens to a message whose
	// expires_at has passed when the pipeline reads it ("" is drop).
	// With dead_letter, Expired parks it for each sink it was routed to,
	// named by SinkNames (in the routes' order).
	OnExpired config.ExpiredPolicy
	Expired   Refusals
	SinkNames []string
	// Relation, when set, is called, from Run's goroutine, on every
	// Relation message of the stream: the coverage watcher looks at the
	// catalog then (internal/coverage). It must not block.
	Relation func()
	// Metrics counts what the pipeline sees; a nil counter counts nothing.
	Metrics Metrics
	Log     zerolog.Logger
}

// Pipeline is the stage between the replication stream and the sinks'
// runners (see the package documentation). It alone writes and closes the
// sinks' channels. Run is called once, from one goroutine; Fill and
// Handled from any.
type Pipeline struct {
	dec       *decoder.Decoder
	tracker   *checkpoint.Tracker
	window    *Window
	sinks     []chan []publish.Delivery
	out       [][]publish.Delivery // per sink: deliveries of this input batch, not sent yet
	routes    []config.Route
	skip      []store.Position // per sink: what it acknowledged before a restart
	dead      DeadLetters
	onInvalid Policy    // relay.on_invalid
	holds     HoldStore // with onInvalid HoldKey
	held      *heldKeys // keys held for every sink
	marker    Marker
	onRel     func() // Options.Relation
	// relay.on_expired (expired.go)
	onExpired config.ExpiredPolicy
	expired   Refusals
	sinkNames []string
	now       func() time.Time
	metrics   Metrics
	log       zerolog.Logger
	// tableLess: postgres.source: messages (a forged envelope is parked;
	// a forged adopt message, of an outbox table, ignored).
	tableLess bool

	txn     *checkpoint.Txn // the open transaction's entry, nil between transactions
	targets []int           // the sinks the current message goes to
	ids     []string        // the open transaction's message ids, for marker
	xid     uint32          // the open transaction's id, for marker
	// last is the position of the last row of the open transaction the
	// pipeline handled (delivered, parked, held, or routed nowhere);
	// replayed, after a Reset inside a transaction, is that position:
	// the rows of the server's replay up to it were handled already and
	// go nowhere again ("A reconnect inside a run" in docs/design.md).
	last     store.Position
	replayed store.Position
	again    int // rows of the replay gone past, for the log

	// The publication or the table changing under the relay (gap.go).
	foreign map[uint32]bool // relations that are not the outbox, reported
	carried carried         // the last ids the stream carried
	pos     position        // the last commit or progress point handled
	fills   chan *fill      // rows read from the table, to relay unless carried
	pending *fill           // a fill waiting for the open transaction's end
	fillSeq uint32          // the last seq given to a held row of a fill
}

// New returns a pipeline with one output channel per route.
func New(o Options) *Pipeline {
	p := &Pipeline{dec: o.Decoder, tracker: o.Tracker, window: o.Window, routes: o.Routes,
		dead: o.DeadLetters, onInvalid: o.Invalid, tableLess: o.TableLess, marker: o.Marker, onRel: o.Relation,
		metrics: o.Metrics.orNop(), log: o.Log, fills: make(chan *fill), holds: o.HoldStore,
		onExpired: o.OnExpired, expired: o.Expired, sinkNames: o.SinkNames, now: time.Now}
	p.held = newHeldKeys("", o.Holds, o.HoldStore, p.metrics.Held, p.metrics.HeldKeys, o.Log, "bad row (relay.on_invalid: hold_key)")
	p.sinks = make([]chan []publish.Delivery, len(o.Routes))
	for i := range p.sinks {
		p.sinks[i] = make(chan []publish.Delivery, sinkBuffer)
	}
	p.out = make([][]publish.Delivery, len(o.Routes))
	p.skip = make([]store.Position, len(o.Routes))
	copy(p.skip, o.Acked)
	return p
}

// Out returns sink i's channel: delivery slices in WAL order, closed when
// Run returns. Its receiver owns each slice.
func (p *Pipeline) Out(i int) <-chan []publish.Delivery { return p.sinks[i] }

// StopAtRow is Run's error for a row it cannot map and may not park:
// everything before it was handed to the sinks, nothing after. NoKey is
// set when relay.on_invalid: hold_key could not read the row's ordering
// key, so could not tell which messages to hold behind it. Fill is set
// for a row a gap fill read from the table (not from the stream: cdc skip
// cannot park it, and its position is the fill's).
type StopAtRow struct {
	Err   *decoder.Error
	NoKey bool
	Fill  bool
}

func (e *StopAtRow) Error() string { return e.Err.Error() }
func (e *StopAtRow) Unwrap() error { return e.Err }

// Run takes the stream's events until events is closed (nil), ctx ends or
// a stage fails (its error): a *StopAtRow, an error wrapping
// decoder.ErrProtocol, or a dead-letter, marker or window error. Whatever
// it returns, it first hands the sinks what it gathered before the
// failure, then closes their channels.
func (p *Pipeline) Run(ctx context.Context, events <-chan []replication.Event) error {
	defer func() {
		for _, c := range p.sinks {
			close(c)
		}
	}()
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
				p.reset()
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
		if p.pending != nil && p.txn == nil && p.replayed.CommitLSN == 0 {
			if err := p.doFill(ctx, p.pending); err != nil {
				return err
			}
			p.pending = nil
		}
	}
}

// flush sends each sink the deliveries gathered from the input batch.
func (p *Pipeline) flush(ctx context.Context) error {
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

// data handles one pgoutput message.
func (p *Pipeline) data(ctx context.Context, ev replication.Event) error {
	// The event's data is the pipeline's (replication.Event.Data): a large
	// payload stays in it instead of being copied.
	e, err := p.dec.DecodeOwned(ev.LSN, ev.Data)
	if err != nil {
		var de *decoder.Error
		if !errors.As(err, &de) {
			return err
		}
		if p.seen(de.CommitLSN, de.LSN, de.Seq) {
			return nil
		}
		if err := p.invalid(ctx, de, false); err != nil {
			return err
		}
		if de.ID != "" {
			p.carried.add(de.ID) // handled: a fill leaves it out
		}
		return nil
	}
	if e.Rel != nil {
		p.relationSeen(e.Rel)
		if p.onRel != nil {
			p.onRel()
		}
	}
	switch e.Kind {
	case decoder.Begin:
		p.begin(e)
	case decoder.Commit:
		return p.commit(ctx, e)
	case decoder.Progress:
		p.tracker.Progress(e.LSN)
		p.pos.raise(e.LSN)
	case decoder.Row:
		if p.seen(e.Msg.CommitLSN, e.Msg.LSN, e.Msg.Seq) {
			return nil
		}
		p.metrics.Decoded.Inc()
		p.carried.add(e.Msg.ID)
		if p.held.holds(e.Msg, false) {
			if held, err := p.held.hold(ctx, e.Msg); held || err != nil {
				return err
			}
		}
		if p.marker != nil {
			p.ids = append(p.ids, e.Msg.ID)
		}
		p.targets = p.targets[:0]
		for i := range p.routes {
			if p.routes[i].Matches(e.Msg.Type) && !p.skip[i].Covers(e.Msg) {
				p.targets = append(p.targets, i)
			}
		}
		if len(p.targets) == 0 {
			p.log.Debug().Str("msg_id", e.Msg.ID).Str("type", e.Msg.Type).Msg("no sink needs this message (not routed, or acknowledged before a restart)")
			return nil
		}
		m, err := p.unlessExpired(ctx, e.Msg)
		if m == nil || err != nil {
			return err
		}
		return p.deliver(ctx, publish.Delivery{Msg: m, Txn: p.txn})
	}
	return nil
}

// commit ends the open transaction: the marker gets its ids first, then
// the tracker its end.
func (p *Pipeline) commit(ctx context.Context, e decoder.Event) error {
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
	if p.replayed.CommitLSN != 0 {
		p.log.Info().Str("commit_lsn", p.replayed.CommitLSN.String()).Int("rows", p.again).
			Msg("transaction sent again after a reconnect inside it: its rows handled before were not handed on again")
		p.replayed, p.again = store.Position{}, 0
	}
	p.pos.raise(e.LSN)
	return nil
}

// reset handles a new connection (replication.Reset): the decoder starts
// afresh and the open transaction, if any, is abandoned in the tracker
// (what of it was handed on must still be acknowledged before anything
// after it is confirmed). The server sends that transaction again from
// its Begin: the rows of it handled so far are remembered (replayed, and
// their ids for the marker), so that the replay hands no sink, parks and
// holds nothing it already had, and the marker still gets every id of
// the transaction once, at its commit (docs/design.md, "A reconnect
// inside a run").
func (p *Pipeline) reset() {
	p.dec.Reset()
	p.tracker.Abandon()
	if p.txn != nil && p.last.CommitLSN != 0 && !covers(p.replayed, p.last.CommitLSN, p.last.LSN, p.last.Seq) {
		p.replayed = p.last
	}
	if p.replayed.CommitLSN == 0 {
		p.ids = nil
	}
	p.txn = nil
}

// begin opens a transaction in the tracker. A replay that is not the
// transaction a Reset left open (which the server does not do) drops
// what was remembered of that one.
func (p *Pipeline) begin(e decoder.Event) {
	p.txn, p.xid = p.tracker.Begin(), e.Xid
	p.last = store.Position{}
	if r := p.replayed; r.CommitLSN != 0 && r.CommitLSN != e.CommitLSN {
		p.log.Warn().Str("commit_lsn", e.CommitLSN.String()).Str("abandoned_commit_lsn", r.CommitLSN.String()).
			Msg("after a reconnect the server sent another transaction than the one left open: that one's rows handed on before are not looked for")
		p.replayed, p.ids, p.again = store.Position{}, nil, 0
	}
}

// seen reports whether the row at (commit, lsn, seq) was handled before
// a reconnect inside its transaction: the server's replay of it goes
// nowhere. Otherwise it records the row as the last handled.
func (p *Pipeline) seen(commit, lsn pglogrepl.LSN, seq uint32) bool {
	if commit == 0 {
		return false // not in a transaction (a non-transactional logical message)
	}
	if r := p.replayed; r.CommitLSN != 0 && covers(r, commit, lsn, seq) {
		p.again++
		return true
	}
	p.last = store.Position{CommitLSN: commit, LSN: lsn, Seq: seq}
	return false
}

// covers reports whether the row at (commit, lsn, seq) is at or before
// at (store.Position.Covers).
func covers(at store.Position, commit, lsn pglogrepl.LSN, seq uint32) bool {
	switch {
	case commit != at.CommitLSN:
		return commit < at.CommitLSN
	case lsn != at.LSN:
		return lsn < at.LSN
	}
	return seq <= at.Seq
}

// deliver takes room in the window for d to each of p.targets, tracks the
// deliveries in d.Txn and gathers them for the sinks. When the window is
// full it hands on what is gathered (its acks are what frees the window),
// then waits.
func (p *Pipeline) deliver(ctx context.Context, d publish.Delivery) error {
	n := len(p.targets)
	size := int64(n * d.Msg.Size())
	if !p.window.TryAcquire(n, size) {
		if err := p.flush(ctx); err != nil {
			return err
		}
		if err := p.window.Acquire(ctx, n, size); err != nil {
			return err // the relay is failing; nothing after this may be tracked
		}
	}
	p.tracker.Add(d.Txn, n)
	for _, i := range p.targets {
		p.out[i] = append(p.out[i], d)
	}
	return nil
}

// invalid handles a row the decoder cannot map: by relay.on_invalid, it
// parks it and goes on, or stops at it unless `cdc skip` parked it; a
// forged message is never published and never stops the relay; a table
// that does not fit the mapping always stops it (parking would take every
// row of the table). fromFill: the row came from a gap fill (doFill).
func (p *Pipeline) invalid(ctx context.Context, de *decoder.Error, fromFill bool) error {
	switch {
	case de.Table:
		return &StopAtRow{Err: de}
	case de.Forged && !p.tableLess:
		// A forged adopt message: not a row at all (the rows are in the
		// table); ignored, loudly.
		p.metrics.ForgedAdopts.Inc()
		p.log.Error().Str("lsn", de.LSN.String()).Str("commit_lsn", de.CommitLSN.String()).Str("error", de.Err.Error()).
			Msg("forged adopt message ignored: not published")
		return nil
	case de.Forged:
		// Whoever wrote it may not publish, and must not stop the relay
		// either: parked whatever relay.on_invalid says.
		if err := p.dead.Park(ctx, de, ""); err != nil {
			return err
		}
		p.metrics.ForgedEnvelopes.Inc()
		p.log.Error().Str("msg_id", de.ID).Str("lsn", de.LSN.String()).Str("commit_lsn", de.CommitLSN.String()).
			Str("error", de.Err.Error()).Msg("message not signed with a key of postgres.message_keys: parked in the dead-letter table, not published; going on")
		return nil
	case !p.onInvalid.Parks() && fromFill:
		return &StopAtRow{Err: de, Fill: true}
	case !p.onInvalid.Parks():
		return p.stopUnlessSkipped(ctx, &StopAtRow{Err: de})
	}
	if p.onInvalid.holds() {
		if fromFill && !de.KeyKnown {
			return &StopAtRow{Err: de, NoKey: true, Fill: true}
		}
		return p.holdInvalid(ctx, de)
	}
	if err := p.dead.Park(ctx, de, ""); err != nil {
		return err
	}
	p.metrics.DeadLettered.Inc()
	p.log.Error().Str("msg_id", de.ID).Str("lsn", de.LSN.String()).Uint32("seq", de.Seq).Str("commit_lsn", de.CommitLSN.String()).
		Str("error", de.Err.Error()).Msg("bad outbox row parked in the dead-letter table; going on")
	return nil
}

// stopUnlessSkipped returns stop, for a row the relay may not park,
// unless `cdc skip` parked that row: then it goes past it.
func (p *Pipeline) stopUnlessSkipped(ctx context.Context, stop *StopAtRow) error {
	de := stop.Err
	parked, err := p.dead.Parked(ctx, de.LSN, de.Seq)
	if err != nil {
		return fmt.Errorf("%w (and looking it up in the dead-letter table failed: %v)", de, err)
	}
	if !parked {
		return stop
	}
	p.log.Warn().Str("msg_id", de.ID).Str("lsn", de.LSN.String()).Uint32("seq", de.Seq).Str("error", de.Err.Error()).
		Msg("bad outbox row parked by cdc skip; going past it")
	return nil
}

// holdInvalid parks a bad row as the head of its ordering key
// (relay.on_invalid: hold_key): every later message of the key is held
// behind it. A row whose key cannot be read stops the relay (which
// messages to hold is unknown) unless `cdc skip` parked it.
func (p *Pipeline) holdInvalid(ctx context.Context, de *decoder.Error) error {
	if !de.KeyKnown {
		return p.stopUnlessSkipped(ctx, &StopAtRow{Err: de, NoKey: true})
	}
	if err := p.holds.ParkHead(ctx, de); err != nil {
		return err
	}
	p.metrics.DeadLettered.Inc()
	p.held.add(de.Key, store.Position{CommitLSN: de.CommitLSN, LSN: de.LSN, Seq: de.Seq})
	p.log.Error().Str("msg_id", de.ID).Str("lsn", de.LSN.String()).Uint32("seq", de.Seq).Str("commit_lsn", de.CommitLSN.String()).
		Str("key", de.Key).Str("error", de.Err.Error()).
		Msg("bad outbox row parked in the dead-letter table; its key is held: its later messages are parked behind it until cdc dead-letter resend or drop of this row; the other keys go on")
	return nil
}
