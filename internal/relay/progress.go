package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
)

// Position is a point in the stream: messages are totally ordered by
// (CommitLSN, LSN), transactions in commit order and rows in insert order.
type Position struct {
	CommitLSN, LSN pglogrepl.LSN
}

// Covers reports whether the message at (commit, lsn) is at or before p.
func (p Position) Covers(commit, lsn pglogrepl.LSN) bool {
	return commit < p.CommitLSN || commit == p.CommitLSN && lsn <= p.LSN
}

// progressStore persists each sink's position: the last message it
// acknowledged. The slot is confirmed at the slowest sink's pace; after a
// restart the stream starts there, and the pipeline does not send a sink
// the messages its position covers, so only sinks that were behind get
// duplicates. The store is an optimisation for duplicates only: a position
// written late costs re-sends, never a loss, because it is only ever set to
// what the sink acknowledged.
//
// progressStore is safe for concurrent use: Acked from the sink runners,
// Run from one goroutine.
type progressStore struct {
	url   string
	table string // quoted, schema-qualified; "" disables persistence
	slot  string
	log   zerolog.Logger

	mu    sync.Mutex
	pos   map[string]Position
	dirty bool
}

const progressDDL = `CREATE TABLE IF NOT EXISTS %s (
    slot       text        NOT NULL,
    sink       text        NOT NULL,
    commit_lsn pg_lsn      NOT NULL,
    lsn        pg_lsn      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (slot, sink)
)`

func quoteTable(t string) string {
	if t == "" || t == "-" {
		return ""
	}
	return pgx.Identifier(strings.Split(t, ".")).Sanitize()
}

// loadProgress creates the table when missing and reads the slot's
// positions.
func loadProgress(ctx context.Context, conn *pgx.Conn, table, slot string) (map[string]Position, error) {
	if table == "" {
		return map[string]Position{}, nil
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf(progressDDL, table)); err != nil {
		return nil, fmt.Errorf("creating progress table %s (postgres.progress_table; \"-\" disables per-sink progress): %w", table, err)
	}
	return readProgress(ctx, conn, table, slot)
}

// readProgress reads the positions saved for slot in table.
func readProgress(ctx context.Context, conn *pgx.Conn, table, slot string) (map[string]Position, error) {
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT sink, commit_lsn::text, lsn::text FROM %s WHERE slot = $1", table), slot)
	if err != nil {
		return nil, fmt.Errorf("reading progress table %s: %w", table, err)
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

// Acked records that sink acknowledged everything up to p.
func (s *progressStore) Acked(sink string, p Position) {
	s.mu.Lock()
	if old := s.pos[sink]; !old.Covers(p.CommitLSN, p.LSN) {
		s.pos[sink] = p
		s.dirty = true
	}
	s.mu.Unlock()
}

// Run writes changed positions every interval until ctx ends, then once
// more after final is closed (the sinks drained).
func (s *progressStore) Run(ctx context.Context, interval time.Duration, final <-chan struct{}) error {
	if s.table == "" {
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
		batch := make(map[string]Position, len(s.pos))
		for k, v := range s.pos {
			batch[k] = v
		}
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

func (s *progressStore) write(ctx context.Context, conn **pgx.Conn, batch map[string]Position) error {
	if *conn == nil {
		c, err := pgx.Connect(ctx, s.url)
		if err != nil {
			return err
		}
		*conn = c
	}
	sinks := make([]string, 0, len(batch))
	commits := make([]string, 0, len(batch))
	lsns := make([]string, 0, len(batch))
	for k, v := range batch {
		sinks = append(sinks, k)
		commits = append(commits, v.CommitLSN.String())
		lsns = append(lsns, v.LSN.String())
	}
	_, err := (*conn).Exec(ctx, fmt.Sprintf(`INSERT INTO %s (slot, sink, commit_lsn, lsn, updated_at)
		SELECT $1, s, c::pg_lsn, l::pg_lsn, now() FROM unnest($2::text[], $3::text[], $4::text[]) AS u(s, c, l)
		ON CONFLICT (slot, sink) DO UPDATE SET commit_lsn = EXCLUDED.commit_lsn, lsn = EXCLUDED.lsn, updated_at = now()`, s.table),
		s.slot, sinks, commits, lsns)
	if err != nil {
		(*conn).Close(context.Background())
		*conn = nil
		if errors.Is(err, context.Canceled) {
			return nil
		}
	}
	return err
}
