// Package sentat fills in the outbox's sent-at column (columns.sent_at)
// once every sink acknowledged a row, so that an application that used a
// polling dispatcher keeps its cleanup job ("delete rows sent more than
// a week ago") unchanged when walpost replaces the dispatcher.
//
// The pipeline hands the Marker each transaction's id (xid) and message
// ids at its commit, before the checkpoint tracker may confirm it. The
// Marker updates, in batches and off the hot path, the rows of the
// transactions the tracker has confirmed (every sink acknowledged them):
//
//	UPDATE outbox SET sent_at = now() WHERE id = ANY($1) AND sent_at IS NULL
//
// and the slot is confirmed no further than the rows marked: the Marker
// stands between the tracker and the stream (it is the stream's
// Confirmer). So a crash after the sinks acknowledged a row but before
// its UPDATE committed streams the row again after the restart (one more
// delivery, as at-least-once allows) and marks it then; a row whose
// sent_at is set was acknowledged by every sink.
//
// A commit is in the WAL, and so decoded, relayed and acknowledged,
// before it is visible to other sessions (and for as long as a
// synchronous standby keeps it waiting): an UPDATE in that gap finds
// none of its rows. So the Marker first asks whether each transaction
// is visible to a snapshot taken now (pg_visible_in_snapshot, its xid
// widened to 64 bits with the snapshot's epoch) and updates only the
// rows of visible ones; an invisible transaction stays at the head of
// the queue, holding the confirmation, and is asked about again (with a
// log line after a second). A row of a visible transaction that the
// UPDATE does not match was marked already (a transaction streamed
// again) or deleted (retention, delete-after-insert): the statement
// counts both. See docs/design.md, "sent_at and adopt".
//
// A Marker is safe for concurrent use: Add from the pipeline, Confirmed
// and Idle from the stream, Run and Flush from the relay.
package sentat

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/backoff"
	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/pgconnect"
)

// Source is the position every sink acknowledged: the checkpoint tracker.
type Source interface {
	Confirmed() pglogrepl.LSN
	Idle() bool
}

// maxBatch is the most ids one UPDATE carries (a transaction with more
// is marked in several statements).
const maxBatch = 5000

// maxPending is how many ids may wait to be marked before Add waits for
// the marking to catch up (about 14 MB of ids): while the UPDATEs fail,
// the relay stops reading instead of holding every id in memory.
const maxPending = 200_000

// Marker marks acknowledged rows sent. See the package documentation.
type Marker struct {
	src Source
	log zerolog.Logger

	mu      sync.Mutex
	queue   []entry // committed transactions not yet marked, in stream order
	pending int     // ids in queue
	out     pglogrepl.LSN
	wake    chan struct{} // asks Run for a round now
	space   chan struct{} // told after a round marked something

	round sync.Mutex // one marking round at a time
	db    db         // used by whoever holds round
}

// entry is one transaction's rows: its end LSN (what confirming it
// means), the position confirmed when it was added (safe to confirm while
// it is not marked), its xid, whether that was seen visible, and its
// message ids.
type entry struct {
	end, prev pglogrepl.LSN
	xid       uint32
	visible   bool // set under round
	ids       []string
}

// db is what a marking round asks of PostgreSQL (pgDB; a fake in the
// unit tests). It is used by one goroutine at a time.
type db interface {
	// Visible reports, for each xid (32 bits, as pgoutput's Begin carries
	// it), whether its transaction is visible to a snapshot taken now: a
	// committed transaction's rows are, from then on, to every statement.
	Visible(ctx context.Context, xids []uint32) ([]bool, error)
	// Mark sets the sent-at column of the rows of ids where it is NULL and
	// counts, in the same snapshot, the rows it set and those it found set
	// already; the other ids' rows are gone (or were marked or deleted by a
	// transaction that committed meanwhile).
	Mark(ctx context.Context, ids []string) (set, already int, err error)
	// Close ends the connection, if any (another call opens a new one).
	Close()
}

// Check verifies, on an ordinary connection, that the relay may set the
// sent-at column of t and returns the statement that does it ($1 = the
// ids as text[]; it returns the rows it set and the rows whose sent-at
// was set already). t.Columns[layout.SentAt] must be set.
func Check(ctx context.Context, conn *pgx.Conn, t layout.Table) (stmt string, err error) {
	col := t.Columns[layout.SentAt]
	var idType, sentType string
	err = conn.QueryRow(ctx, `SELECT
			(SELECT format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND NOT attisdropped),
			(SELECT format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $3 AND NOT attisdropped)`,
		t.Qualified(), t.Columns[layout.ID], col).Scan(&idType, &sentType)
	if err != nil {
		return "", fmt.Errorf("columns.sent_at: reading the columns of %s: %w", t, err)
	}
	now := "now()"
	switch sentType {
	case "timestamp with time zone":
	case "timestamp without time zone":
		now = "(now() AT TIME ZONE 'UTC')"
	default:
		return "", fmt.Errorf("columns.sent_at: column %q of %s has type %s; it must be timestamptz or timestamp (nullable)", col, t, sentType)
	}
	var may bool
	if err := conn.QueryRow(ctx, "SELECT has_column_privilege($1, $2, 'UPDATE')", t.Qualified(), col).Scan(&may); err != nil {
		return "", fmt.Errorf("columns.sent_at: checking privileges on %s: %w", t, err)
	}
	if !may {
		return "", fmt.Errorf("columns.sent_at: the relay's role may not set column %q of %s; GRANT UPDATE (%s) ON %s TO <the relay's role> (see sql/roles.sql)",
			col, t, pgx.Identifier{col}.Sanitize(), t.Qualified())
	}
	ids := "$1::text[]"
	if idType == "uuid" {
		ids = "$1::text[]::uuid[]"
	}
	sent, id := t.Columns.Column(layout.SentAt), t.Columns.Column(layout.ID)
	// The main query sees the table as the UPDATE found it (one snapshot):
	// the rows it set are NULL there.
	return fmt.Sprintf(`WITH u AS (UPDATE %[1]s SET %[2]s = %[3]s WHERE %[4]s = ANY(%[5]s) AND %[2]s IS NULL RETURNING 1)
SELECT (SELECT count(*) FROM u), count(*) FILTER (WHERE %[2]s IS NOT NULL) FROM %[1]s WHERE %[4]s = ANY(%[5]s)`,
		t.Qualified(), sent, now, id, ids), nil
}

// New returns a Marker that runs stmt (from Check) on connections to url
// for the rows src has confirmed.
func New(url, stmt string, src Source, log zerolog.Logger) *Marker {
	return newMarker(&pgDB{url: url, stmt: stmt}, src, log)
}

func newMarker(d db, src Source, log zerolog.Logger) *Marker {
	return &Marker{db: d, src: src, log: log, out: src.Confirmed(),
		wake: make(chan struct{}, 1), space: make(chan struct{}, 1)}
}

// Add records a committed transaction's message ids. The pipeline calls it
// at the transaction's commit (end is the end of its commit record, xid
// the transaction's id from its Begin), before telling the tracker, in
// stream order. While more than maxPending ids wait to be marked it waits
// (the pipeline, and so the stream, stop reading) until a round marked
// some, or ctx ends (its error); a transaction alone may hold more.
func (m *Marker) Add(ctx context.Context, end pglogrepl.LSN, xid uint32, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	for {
		m.mu.Lock()
		if len(m.queue) == 0 || m.pending+len(ids) <= maxPending {
			prev := m.src.Confirmed() // below end: the tracker has not seen the commit
			m.queue = append(m.queue, entry{end: end, prev: prev, xid: xid, ids: ids})
			m.pending += len(ids)
			m.mu.Unlock()
			return nil
		}
		m.mu.Unlock()
		notify(m.wake)
		select {
		case <-m.space:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Full reports whether Add of n ids would wait: the caller hands on what
// it holds for the sinks first, as their acknowledgements are what lets
// the marking catch up.
func (m *Marker) Full(n int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.queue) > 0 && m.pending+n > maxPending
}

// notify sends on a channel of one slot without waiting.
func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Confirmed is the position the stream may confirm: the tracker's, but
// not past a transaction whose rows are not marked yet. It never
// decreases.
func (m *Marker) Confirmed() pglogrepl.LSN {
	c := m.src.Confirmed()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.queue) > 0 && m.queue[0].end <= c {
		c = max(m.out, m.queue[0].prev)
		notify(m.wake)
	}
	m.out = max(m.out, c)
	return m.out
}

// Idle reports whether nothing is in flight: the tracker's, and no row
// waiting to be marked.
func (m *Marker) Idle() bool {
	m.mu.Lock()
	n := len(m.queue)
	m.mu.Unlock()
	return n == 0 && m.src.Idle()
}

// Pending is how many transactions wait to be marked.
func (m *Marker) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.queue)
}

// Waiting for a transaction to become visible: the first retry after
// visRetryStart, backing off to visRetryMax; logged once it waited
// visLogAfter, then every visLogEvery.
const (
	visRetryStart = 5 * time.Millisecond
	visRetryMax   = time.Second
	visLogAfter   = time.Second
	visLogEvery   = 30 * time.Second
)

// NotVisibleError is a marking round's answer while the first transaction
// to mark is acknowledged by every sink but its commit is not visible to
// other sessions yet: its rows cannot be marked, and the slot is not
// confirmed past it, until it is.
type NotVisibleError struct {
	Xid  uint32
	End  pglogrepl.LSN // the end of its commit record
	Rows int
}

func (e *NotVisibleError) Error() string {
	return fmt.Sprintf("transaction %d (commit at %s, %d rows) is not visible to other sessions yet", e.Xid, e.End, e.Rows)
}

// visWait follows the wait for one transaction to become visible: when
// it began and when to log next.
type visWait struct {
	xid          uint32
	since, logAt time.Time
	logged       bool
}

// note records that the round found nv's transaction not visible and
// logs when it has waited long enough.
func (w *visWait) note(log zerolog.Logger, nv *NotVisibleError, now time.Time) {
	if w.since.IsZero() || w.xid != nv.Xid {
		*w = visWait{xid: nv.Xid, since: now, logAt: now.Add(visLogAfter)}
	}
	if now.Before(w.logAt) {
		return
	}
	w.logAt, w.logged = now.Add(visLogEvery), true
	log.Warn().Uint32("xid", nv.Xid).Str("lsn", nv.End.String()).Int("rows", nv.Rows).Dur("waited_ms", now.Sub(w.since)).
		Msg("columns.sent_at: a transaction every sink acknowledged is not visible to other sessions yet (its commit waits, e.g. for a synchronous standby); its rows are marked sent once it is, and the slot is not confirmed past it until then")
}

// done ends the wait (the round got past it).
func (w *visWait) done(log zerolog.Logger, now time.Time) {
	if w.logged {
		log.Info().Uint32("xid", w.xid).Dur("waited_ms", now.Sub(w.since)).Msg("columns.sent_at: the transaction is visible now; its rows are marked sent")
	}
	*w = visWait{}
}

// ErrServerGone ends Run when the server the rows are marked on is
// shutting down, restarting or starting (pgconnect.ShuttingDown): the
// relay ends the cycle and starts a new one once the server is back.
var ErrServerGone = errors.New("columns.sent_at: the server is shutting down or restarting; ending the cycle so that it can stop (rows not marked are marked in the next cycle, or sent again)")

// Run marks confirmed rows every interval (sooner when the stream asks
// for a position held back by unmarked rows, or while a transaction to
// mark is not visible yet) until ctx ends. A failed UPDATE is retried
// with backoff; it returns an error for a failure retrying cannot fix
// (the column or its privilege gone) and ErrServerGone (wrapping the
// server's error) when the server is going away.
func (m *Marker) Run(ctx context.Context, interval time.Duration) error {
	retry := backoff.New(100*time.Millisecond, 10*time.Second)
	vis := backoff.New(visRetryStart, visRetryMax)
	var wait visWait
	t := time.NewTicker(interval)
	defer t.Stop()
	defer m.release()
	again := false
	for {
		if !again {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			case <-m.wake:
			}
		}
		again = false
		err := m.markConfirmed(ctx)
		var nv *NotVisibleError
		switch {
		case errors.As(err, &nv):
			wait.note(m.log, nv, time.Now())
			retry.Reset()
			if !backoff.Sleep(ctx, vis.Next()) {
				return nil
			}
			again = true
			continue
		case err == nil:
			retry.Reset()
		case ctx.Err() != nil:
			return nil
		case permanent(err):
			return fmt.Errorf("columns.sent_at: %w", err)
		case pgconnect.ShuttingDown(err):
			// A WAL sender in shutdown waits until the relay confirmed all
			// it sent, which it cannot past rows it could not mark: retrying
			// here kept the replication connection open, and PostgreSQL
			// from stopping, for ever. The cycle ends instead; the next one
			// marks them, or they are sent again (docs/design.md, "sent_at
			// and adopt").
			return fmt.Errorf("%w: %w", ErrServerGone, err)
		default:
			d := retry.Next()
			m.log.Warn().Err(err).Dur("retry_in_ms", d).Int("transactions", m.Pending()).
				Msg("columns.sent_at: marking rows sent failed; the slot is not confirmed past them until it works")
			if !backoff.Sleep(ctx, d) {
				return nil
			}
			continue
		}
		vis.Reset()
		wait.done(m.log, time.Now())
	}
}

// Flush marks what the tracker confirmed, once more (after the sinks
// drained at shutdown), within timeout; a transaction not visible yet is
// waited for meanwhile. What it leaves unmarked keeps the slot's last
// status before it.
func (m *Marker) Flush(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	defer m.release()
	vis := backoff.New(visRetryStart, visRetryMax/4)
	for {
		err := m.markConfirmed(ctx)
		var nv *NotVisibleError
		if errors.As(err, &nv) {
			if backoff.Sleep(ctx, vis.Next()) {
				continue
			}
			m.log.Warn().Uint32("xid", nv.Xid).Str("lsn", nv.End.String()).Int("rows", nv.Rows).
				Msg("columns.sent_at: at shutdown, a transaction every sink acknowledged is still not visible to other sessions; its rows are not marked sent, and the slot stays before it: they are sent again after the restart and marked then")
			return
		}
		if err != nil {
			m.log.Warn().Err(err).Msg("columns.sent_at: last marking failed; those rows are sent again after the restart and marked then")
		}
		return
	}
}

// release closes the marking connection between rounds.
func (m *Marker) release() {
	m.round.Lock()
	defer m.round.Unlock()
	m.db.Close()
}

// markConfirmed marks the rows of every transaction the tracker
// confirmed and whose commit is visible, in statements of at most
// maxBatch ids; a transaction leaves the queue (and may be confirmed)
// once all its rows are marked. It returns a *NotVisibleError when the
// first transaction the tracker confirmed is not visible yet.
func (m *Marker) markConfirmed(ctx context.Context) error {
	m.round.Lock()
	defer m.round.Unlock()
	var set, already, gone int
	defer func() {
		if already+gone > 0 {
			m.log.Debug().Int("marked", set).Int("marked_already", already).Int("gone", gone).
				Msg("columns.sent_at: rows not marked by this round were marked before (a transaction streamed again) or deleted (retention, delete-after-insert)")
		}
	}()
	for {
		c := m.src.Confirmed()
		if err := m.checkVisible(ctx, c); err != nil {
			return err
		}
		ids, whole, part := m.nextBatch(c)
		if len(ids) == 0 {
			return nil
		}
		s, a, err := m.db.Mark(ctx, ids)
		if err != nil {
			return err
		}
		set, already, gone = set+s, already+a, gone+len(ids)-s-a
		m.mu.Lock()
		clear(m.queue[:whole])
		m.queue = m.queue[whole:]
		if part > 0 {
			m.queue[0].ids = m.queue[0].ids[part:]
		}
		m.pending -= len(ids)
		m.mu.Unlock()
		notify(m.space)
	}
}

// checkVisible asks which of the transactions the next statement would
// cover (confirmed up to c, not seen visible yet) are visible now, and
// records it. It returns a *NotVisibleError when the first one is not.
func (m *Marker) checkVisible(ctx context.Context, c pglogrepl.LSN) error {
	m.mu.Lock()
	var at []int
	var xids []uint32
	for i, n := 0, 0; i < len(m.queue) && m.queue[i].end <= c && n < maxBatch; i++ {
		e := &m.queue[i]
		n += len(e.ids)
		if !e.visible {
			at, xids = append(at, i), append(xids, e.xid)
		}
	}
	m.mu.Unlock()
	if len(xids) == 0 {
		return nil
	}
	vis, err := m.db.Visible(ctx, xids)
	if err != nil {
		return err
	}
	if len(vis) != len(xids) {
		return fmt.Errorf("asking whether %d transactions are visible: %d answers", len(xids), len(vis))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, i := range at { // the queue only grows meanwhile: round is held
		m.queue[i].visible = vis[k]
	}
	if e := m.queue[0]; !e.visible {
		return &NotVisibleError{Xid: e.xid, End: e.end, Rows: len(e.ids)}
	}
	return nil
}

// nextBatch returns the ids of the next statement among the transactions
// confirmed up to c and seen visible: those of the first whole entries,
// then part ids of the next entry when it does not fit whole.
func (m *Marker) nextBatch(c pglogrepl.LSN) (ids []string, whole, part int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for whole < len(m.queue) && m.queue[whole].end <= c && m.queue[whole].visible {
		e := m.queue[whole]
		if room := maxBatch - len(ids); len(e.ids) > room {
			part = room
			ids = append(ids, e.ids[:room]...)
			return ids, whole, part
		}
		ids = append(ids, e.ids...)
		whole++
	}
	return ids, whole, 0
}

// pgDB is the db of a Marker: one connection, opened when needed and
// closed after a failure or by release.
type pgDB struct {
	url, stmt string
	conn      *pgx.Conn
}

// visibleQuery answers db.Visible against the snapshot snap (an SQL
// expression of type pg_snapshot). A 32-bit xid x is widened to the
// xid8 at or below the snapshot's xmax w whose low 32 bits are x: the
// transaction committed, so its xid was assigned before w, and xids in
// use are never 2^31 apart (wraparound protection). Xids below 3 (frozen,
// bootstrap) are visible.
func visibleQuery(snap string) string {
	return `SELECT coalesce(array_agg(CASE WHEN x < 3 THEN true WHEN f < 3 THEN false
	ELSE pg_visible_in_snapshot(f::text::xid8, s) END ORDER BY o), '{}')
FROM (SELECT s, pg_snapshot_xmax(s)::text::bigint AS w FROM (SELECT ` + snap + ` AS s) AS s0) AS c,
	unnest($1::bigint[]) WITH ORDINALITY AS u(x, o),
	LATERAL (SELECT w - ((w % 4294967296) - x + 4294967296) % 4294967296 AS f) AS v`
}

func (d *pgDB) connect(ctx context.Context) error {
	if d.conn != nil {
		return nil
	}
	conn, err := pgconnect.Connect(ctx, d.url)
	if err != nil {
		return err
	}
	d.conn = conn
	return nil
}

func (d *pgDB) Visible(ctx context.Context, xids []uint32) ([]bool, error) {
	if err := d.connect(ctx); err != nil {
		return nil, err
	}
	xs := make([]int64, len(xids))
	for i, x := range xids {
		xs[i] = int64(x)
	}
	var vis []bool
	if err := d.conn.QueryRow(ctx, visibleQuery("pg_current_snapshot()"), xs).Scan(&vis); err != nil {
		d.Close()
		return nil, fmt.Errorf("asking whether transactions are visible: %w", err)
	}
	return vis, nil
}

func (d *pgDB) Mark(ctx context.Context, ids []string) (set, already int, err error) {
	if err := d.connect(ctx); err != nil {
		return 0, 0, err
	}
	if err := d.conn.QueryRow(ctx, d.stmt, ids).Scan(&set, &already); err != nil {
		d.Close()
		return 0, 0, err
	}
	return set, already, nil
}

func (d *pgDB) Close() {
	if d.conn != nil {
		d.conn.Close(context.Background())
		d.conn = nil
	}
}

// permanent reports a server error that retrying the UPDATE cannot fix:
// a privilege revoked, a column or table dropped or retyped.
func permanent(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return pe.Code == "42501" || pe.Code == "42703" || pe.Code == "42P01" || pe.Code == "42804"
}
