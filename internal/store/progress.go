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
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/pgconnect"
)

// Position is a point in the stream: messages are totally ordered by
// (CommitLSN, LSN), transactions in commit order and rows in insert order.
type Position struct {
	CommitLSN, LSN pglogrepl.LSN
	// CommitTime is the commit time of the transaction at CommitLSN
	// (progress table's commit_time; zero when unknown). `cdc recover`
	// bounds the rows it relays again with it.
	CommitTime time.Time
}

// Covers reports whether the message at (commit, lsn) is at or before p.
func (p Position) Covers(commit, lsn pglogrepl.LSN) bool {
	return commit < p.CommitLSN || commit == p.CommitLSN && lsn <= p.LSN
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
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT sink, commit_lsn::text, lsn::text FROM %s WHERE slot = $1", t.Progress), t.Slot)
	if err != nil {
		return nil, fmt.Errorf("reading progress table %s: %w", t.Progress, err)
	}
	defer rows.Close()
	pos := map[string]Position{}
	for rows.Next() {
		var sink, c, l string
		if err := rows.Scan(&sink, &c, &l); err != nil {
			return nil, err
		}
		var p Position
		p.CommitLSN, _ = pglogrepl.ParseLSN(c)
		p.LSN, _ = pglogrepl.ParseLSN(l)
		pos[sink] = p
	}
	return pos, rows.Err()
}

// Progress keeps each sink's position in memory and writes the changed
// ones to the progress table every interval.
//
// Progress is safe for concurrent use: Acked from the sink runners, Run
// from one goroutine.
type Progress struct {
	url string
	t   Tables
	log zerolog.Logger

	mu    sync.Mutex
	pos   map[string]Position
	dirty bool
	// noCommitTime: the table has no commit_time column (made before it).
	noCommitTime bool
}

// NewProgress returns a store starting from loaded (LoadProgress's result).
func NewProgress(url string, t Tables, loaded map[string]Position, log zerolog.Logger) *Progress {
	return &Progress{url: url, t: t, log: log, pos: maps.Clone(loaded)}
}

// Acked records that sink acknowledged everything up to p.
func (s *Progress) Acked(sink string, p Position) {
	s.mu.Lock()
	if old := s.pos[sink]; !old.Covers(p.CommitLSN, p.LSN) {
		if s.pos == nil {
			s.pos = map[string]Position{}
		}
		s.pos[sink] = p
		s.dirty = true
	}
	s.mu.Unlock()
}

// Run writes changed positions every interval until ctx ends, then once
// more after final is closed (the sinks drained).
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
		s.dirty = false
		s.mu.Unlock()
		if err := s.write(ctx, &conn, batch); err != nil {
			s.log.Warn().Err(err).Msg("saving per-sink progress failed; will retry (only duplicates are at stake)")
			s.mu.Lock()
			s.dirty = true
			s.mu.Unlock()
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			flush(ctx)
		case <-ctx.Done():
			<-final
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			flush(fctx)
			cancel()
			return nil
		}
	}
}

func (s *Progress) write(ctx context.Context, conn **pgx.Conn, batch map[string]Position) error {
	if *conn == nil {
		c, err := pgconnect.Connect(ctx, s.url)
		if err != nil {
			return err
		}
		*conn = c
	}
	sinks := make([]string, 0, len(batch))
	commits := make([]string, 0, len(batch))
	lsns := make([]string, 0, len(batch))
	times := make([]*time.Time, 0, len(batch))
	for k, v := range batch {
		sinks = append(sinks, k)
		commits = append(commits, v.CommitLSN.String())
		lsns = append(lsns, v.LSN.String())
		if v.CommitTime.IsZero() {
			times = append(times, nil)
		} else {
			times = append(times, &v.CommitTime)
		}
	}
	if s.noCommitTime {
		_, err := (*conn).Exec(ctx, fmt.Sprintf(`INSERT INTO %s (slot, sink, commit_lsn, lsn, updated_at)
		SELECT $1, s, c::pg_lsn, l::pg_lsn, now() FROM unnest($2::text[], $3::text[], $4::text[]) AS u(s, c, l)
		ON CONFLICT (slot, sink) DO UPDATE SET commit_lsn = EXCLUDED.commit_lsn, lsn = EXCLUDED.lsn, updated_at = now()`, s.t.Progress),
			s.t.Slot, sinks, commits, lsns)
		return s.written(conn, err)
	}
	// A position loaded at start has no commit time: the saved one, older
	// than the position's, stays (an earlier bound for cdc recover).
	_, err := (*conn).Exec(ctx, fmt.Sprintf(`INSERT INTO %s AS p (slot, sink, commit_lsn, lsn, commit_time, updated_at)
		SELECT $1, s, c::pg_lsn, l::pg_lsn, t, now() FROM unnest($2::text[], $3::text[], $4::text[], $5::timestamptz[]) AS u(s, c, l, t)
		ON CONFLICT (slot, sink) DO UPDATE SET commit_lsn = EXCLUDED.commit_lsn, lsn = EXCLUDED.lsn,
			commit_time = COALESCE(EXCLUDED.commit_time, p.commit_time), updated_at = now()`, s.t.Progress),
		s.t.Slot, sinks, commits, lsns, times)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42703" {
		// A table made before commit_time, and cdc init not run since:
		// keep saving the positions without it.
		s.noCommitTime = true
		s.log.Warn().Str("table", s.t.ProgressName).Msg("the progress table has no commit_time column (run cdc init to add it): cdc recover cannot bound its selection by it")
		return s.write(ctx, conn, batch)
	}
	return s.written(conn, err)
}

// written closes the connection after a failed write (a new one is made
// next time); a write cut short by the end of ctx is no failure.
func (s *Progress) written(conn **pgx.Conn, err error) error {
	if err != nil {
		(*conn).Close(context.Background())
		*conn = nil
		if errors.Is(err, context.Canceled) {
			return nil
		}
	}
	return err
}
