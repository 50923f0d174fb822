// Package sentat fills in the outbox's sent-at column (columns.sent_at)
// once every sink acknowledged a row, so that an application that used a
// polling dispatcher keeps its cleanup job ("delete rows sent more than
// a week ago") unchanged when walpost replaces the dispatcher.
//
// The pipeline hands the Marker each transaction's message ids at its
// commit, before the checkpoint tracker may confirm it. The Marker
// updates, in batches and off the hot path, the rows of the transactions
// the tracker has confirmed (every sink acknowledged them):
//
//	UPDATE outbox SET sent_at = now() WHERE id = ANY($1) AND sent_at IS NULL
//
// and the slot is confirmed no further than the rows marked: the Marker
// stands between the tracker and the stream (it is the stream's
// Confirmer). So a crash after the sinks acknowledged a row but before
// its UPDATE committed streams the row again after the restart (one more
// delivery, as at-least-once allows) and marks it then; a row whose
// sent_at is set was acknowledged by every sink. See docs/design.md,
// "sent_at and adopt".
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
	url  string
	src  Source
	log  zerolog.Logger
	stmt string

	mu      sync.Mutex
	queue   []entry // committed transactions not yet marked, in stream order
	pending int     // ids in queue
	out     pglogrepl.LSN
	wake    chan struct{} // asks Run for a round now
	space   chan struct{} // told after a round marked something

	round sync.Mutex // one marking round at a time
	conn  *pgx.Conn  // owned by whoever holds round
}

// entry is one transaction's rows: its end LSN (what confirming it
// means), the position confirmed when it was added (safe to confirm while
// it is not marked), and its message ids.
type entry struct {
	end, prev pglogrepl.LSN
	ids       []string
}

// Check verifies, on an ordinary connection, that the relay may set the
// sent-at column of t and returns the UPDATE statement that does it
// ($1 = the ids as text[]). t.Columns[layout.SentAt] must be set.
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
	sent := t.Columns.Column(layout.SentAt)
	return fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s = ANY(%s) AND %s IS NULL",
		t.Qualified(), sent, now, t.Columns.Column(layout.ID), ids, sent), nil
}

// New returns a Marker that runs stmt (from Check) on connections to url
// for the rows src has confirmed.
func New(url, stmt string, src Source, log zerolog.Logger) *Marker {
	return &Marker{url: url, src: src, log: log, stmt: stmt, out: src.Confirmed(),
		wake: make(chan struct{}, 1), space: make(chan struct{}, 1)}
}

// Add records a committed transaction's message ids. The pipeline calls it
// at the transaction's commit (end is the end of its commit record),
// before telling the tracker, in stream order. While more than maxPending
// ids wait to be marked it waits (the pipeline, and so the stream, stop
// reading) until a round marked some, or ctx ends (its error); a
// transaction alone may hold more.
func (m *Marker) Add(ctx context.Context, end pglogrepl.LSN, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	for {
		m.mu.Lock()
		if len(m.queue) == 0 || m.pending+len(ids) <= maxPending {
			prev := m.src.Confirmed() // below end: the tracker has not seen the commit
			m.queue = append(m.queue, entry{end: end, prev: prev, ids: ids})
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

// Run marks confirmed rows every interval (sooner when the stream asks
// for a position held back by unmarked rows) until ctx ends. A failed
// UPDATE is retried with backoff; it returns an error only for a failure
// retrying cannot fix (the column or its privilege gone).
func (m *Marker) Run(ctx context.Context, interval time.Duration) error {
	retry := backoff.New(100*time.Millisecond, 10*time.Second)
	t := time.NewTicker(interval)
	defer t.Stop()
	defer m.release()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-m.wake:
		}
		err := m.markConfirmed(ctx)
		switch {
		case err == nil:
			retry.Reset()
		case ctx.Err() != nil:
			return nil
		case permanent(err):
			return fmt.Errorf("columns.sent_at: %w", err)
		default:
			wait := retry.Next()
			m.log.Warn().Err(err).Dur("retry_in", wait).Int("transactions", m.Pending()).
				Msg("columns.sent_at: marking rows sent failed; the slot is not confirmed past them until it works")
			if !backoff.Sleep(ctx, wait) {
				return nil
			}
		}
	}
}

// Flush marks what the tracker confirmed, once more (after the sinks
// drained at shutdown), within timeout.
func (m *Marker) Flush(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := m.markConfirmed(ctx); err != nil {
		m.log.Warn().Err(err).Msg("columns.sent_at: last marking failed; those rows are sent again after the restart and marked then")
	}
	m.release()
}

// release closes the marking connection between rounds.
func (m *Marker) release() {
	m.round.Lock()
	defer m.round.Unlock()
	m.closeConn()
}

// markConfirmed marks the rows of every transaction the tracker
// confirmed, in statements of at most maxBatch ids; a transaction leaves
// the queue (and may be confirmed) once all its rows are marked.
func (m *Marker) markConfirmed(ctx context.Context) error {
	m.round.Lock()
	defer m.round.Unlock()
	for {
		ids, whole, part := m.nextBatch(m.src.Confirmed())
		if len(ids) == 0 {
			return nil
		}
		if err := m.update(ctx, ids); err != nil {
			return err
		}
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

// nextBatch returns the ids of the next statement among the transactions
// confirmed up to c: those of the first whole entries, then part ids of
// the next entry when it does not fit whole.
func (m *Marker) nextBatch(c pglogrepl.LSN) (ids []string, whole, part int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for whole < len(m.queue) && m.queue[whole].end <= c {
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

func (m *Marker) update(ctx context.Context, ids []string) error {
	if m.conn == nil {
		conn, err := pgconnect.Connect(ctx, m.url)
		if err != nil {
			return err
		}
		m.conn = conn
	}
	if _, err := m.conn.Exec(ctx, m.stmt, ids); err != nil {
		m.closeConn()
		return err
	}
	return nil
}

func (m *Marker) closeConn() {
	if m.conn != nil {
		m.conn.Close(context.Background())
		m.conn = nil
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
