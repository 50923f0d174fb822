package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/pgconnect"
)

// Position is a point in the stream: messages are totally ordered by
// (CommitLSN, LSN, Seq), transactions in commit order and rows in insert
// order; Seq tells apart the rows of one multi-insert WAL record (COPY),
// which share an LSN (message.Message.Seq). CommitTime is the commit
// time of the message at the position (zero when unknown): `cdc recover`
// takes it as the time from which rows may be undelivered.
type Position struct {
	CommitLSN, LSN pglogrepl.LSN
	Seq            uint32
	CommitTime     time.Time
}

// PositionOf returns the position of m.
func PositionOf(m *message.Message) Position {
	return Position{CommitLSN: m.CommitLSN, LSN: m.LSN, Seq: m.Seq, CommitTime: m.CommitTime}
}

// Covers reports whether the message m is at or before p.
func (p Position) Covers(m *message.Message) bool {
	return p.covers(m.CommitLSN, m.LSN, m.Seq)
}

func (p Position) covers(commit, lsn pglogrepl.LSN, seq uint32) bool {
	switch {
	case commit != p.CommitLSN:
		return commit < p.CommitLSN
	case lsn != p.LSN:
		return lsn < p.LSN
	}
	return seq <= p.Seq
}

// LoadProgress reads the positions saved for t.Slot: empty when progress
// is disabled, nil (and no error) when the table does not exist.
func LoadProgress(ctx context.Context, conn *pgx.Conn, t Tables) (map[string]Position, error) {
	if t.Progress == "" {
		return map[string]Position{}, nil
	}
	if ok, err := TableExists(ctx, conn, t.Progress); err != nil || !ok {
		return nil, err
	}
	cols := "seq, commit_time"
	if todo, err := pending(ctx, conn, t.Progress, false); err != nil {
		return nil, err
	} else if len(todo) > 0 {
		cols = "0::bigint, NULL::timestamptz" // an older walpost's table (cdc status reads it as it is)
	}
	// A row at 0/0 records only that its sink is failing (health.go).
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT sink, commit_lsn::text, lsn::text, %s FROM %s WHERE slot = $1 AND commit_lsn <> '0/0'", cols, t.Progress), t.Slot)
	if err != nil {
		return nil, fmt.Errorf("reading progress table %s: %w", t.Progress, err)
	}
	defer rows.Close()
	pos := map[string]Position{}
	for rows.Next() {
		var sink, c, l string
		var seq int64
		var at *time.Time
		if err := rows.Scan(&sink, &c, &l, &seq, &at); err != nil {
			return nil, err
		}
		p := Position{Seq: uint32(seq)}
		p.CommitLSN, _ = pglogrepl.ParseLSN(c)
		p.LSN, _ = pglogrepl.ParseLSN(l)
		if at != nil {
			p.CommitTime = *at
		}
		pos[sink] = p
	}
	return pos, rows.Err()
}

// Progress keeps each sink's position in memory and writes the changed
// ones to the progress table, at most once every interval; while nothing
// changes it does not wake (an idle fleet of many sources: docs/design.md,
// "Invariant 17 at rest, and what an idle fleet costs").
//
// Progress is safe for concurrent use: Acked from the sink runners, Run
// from one goroutine.
type Progress struct {
	url string
	t   Tables
	log zerolog.Logger

	mu     sync.Mutex
	pos    map[string]Position
	health map[string]*healthState // sinks this relay saw failing (health.go)
	dirty  bool
	// changed gets a value when dirty becomes true: Run wakes.
	changed chan struct{}

	// Run's goroutine only.
	noHealth *bool // the table lacks the health columns; nil until looked up
	cleared  bool  // the failing state a previous relay left was cleared
}

// NewProgress returns a store starting from loaded (LoadProgress's result).
func NewProgress(url string, t Tables, loaded map[string]Position, log zerolog.Logger) *Progress {
	return &Progress{url: url, t: t, log: log, pos: maps.Clone(loaded), changed: make(chan struct{}, 1)}
}

// Acked records that sink acknowledged everything up to p.
func (s *Progress) Acked(sink string, p Position) {
	s.mu.Lock()
	if old := s.pos[sink]; !old.covers(p.CommitLSN, p.LSN, p.Seq) {
		if s.pos == nil {
			s.pos = map[string]Position{}
		}
		s.pos[sink] = p
		s.setDirty()
	}
	s.mu.Unlock()
}

// setDirty marks positions to write and wakes Run. Called with mu held.
func (s *Progress) setDirty() {
	if !s.dirty {
		s.dirty = true
		select {
		case s.changed <- struct{}{}:
		default:
		}
	}
}

// Run writes changed positions, at most once every interval, until ctx
// ends, then once more after final is closed (the sinks drained).
func (s *Progress) Run(ctx context.Context, interval time.Duration, final <-chan struct{}) error {
	if s.t.Progress == "" {
		return nil
	}
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	flush := func(ctx context.Context) {
		s.mu.Lock()
		if !s.dirty {
			s.mu.Unlock()
			return
		}
		batch := maps.Clone(s.pos)
		health := map[string]healthState{}
		for sink, h := range s.health {
			if h.dirty {
				health[sink] = *h
				h.dirty = false
			}
		}
		s.dirty = false
		s.mu.Unlock()
		if err := s.write(ctx, &conn, batch, health); err != nil {
			s.log.Warn().Err(err).Msg("saving per-sink progress failed; will retry (only duplicates are at stake)")
			s.mu.Lock()
			s.setDirty()
			for sink, h := range health {
				if cur := s.health[sink]; cur != nil && cur.failing == h.failing && cur.err == h.err {
					cur.dirty = true
				}
			}
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	s.setDirty() // the first flush clears what a previous relay recorded failing
	s.mu.Unlock()
	wait := time.NewTimer(interval)
	defer wait.Stop()
	for {
		// A change, then the rest of interval since the last write (more
		// changes meanwhile go in the same write).
		select {
		case <-s.changed:
			select {
			case <-wait.C:
			case <-ctx.Done():
			}
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			<-final
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			flush(fctx)
			cancel()
			return nil
		}
		flush(ctx)
		wait.Reset(interval)
	}
}

func (s *Progress) write(ctx context.Context, conn **pgx.Conn, batch map[string]Position, health map[string]healthState) error {
	if *conn == nil {
		c, err := pgconnect.Connect(ctx, s.url)
		if err != nil {
			return err
		}
		*conn = c
	}
	err := s.writePositions(ctx, *conn, batch)
	if err == nil && !s.cleared {
		err = s.clearHealth(ctx, *conn)
	}
	if err == nil {
		err = s.writeHealth(ctx, *conn, health)
	}
	if err != nil {
		(*conn).Close(context.Background())
		*conn = nil
		if errors.Is(err, context.Canceled) {
			return nil
		}
	}
	return err
}

func (s *Progress) writePositions(ctx context.Context, conn *pgx.Conn, batch map[string]Position) error {
	if len(batch) == 0 {
		return nil
	}
	sinks := make([]string, 0, len(batch))
	commits := make([]string, 0, len(batch))
	lsns := make([]string, 0, len(batch))
	seqs := make([]int64, 0, len(batch))
	times := make([]*time.Time, 0, len(batch))
	for k, v := range batch {
		sinks = append(sinks, k)
		commits = append(commits, v.CommitLSN.String())
		lsns = append(lsns, v.LSN.String())
		seqs = append(seqs, int64(v.Seq))
		var at *time.Time
		if !v.CommitTime.IsZero() {
			at = &v.CommitTime
		}
		times = append(times, at)
	}
	// A position without a commit time keeps the one saved, older than
	// the position's (an earlier bound for cdc recover). The relay's check
	// made sure the table has seq and commit_time (checkUpgraded).
	_, err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s AS p (slot, sink, commit_lsn, lsn, seq, commit_time, updated_at)
		SELECT $1, s, c::pg_lsn, l::pg_lsn, q, ct, now() FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::timestamptz[]) AS u(s, c, l, q, ct)
		ON CONFLICT (slot, sink) DO UPDATE SET commit_lsn = EXCLUDED.commit_lsn, lsn = EXCLUDED.lsn, seq = EXCLUDED.seq,
			commit_time = COALESCE(EXCLUDED.commit_time, p.commit_time), updated_at = now()`, s.t.Progress),
		s.t.Slot, sinks, commits, lsns, seqs, times)
	return err
}
