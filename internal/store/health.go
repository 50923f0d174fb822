package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// A sink's health in the progress table (docs/operations.md, "cdc
// status"): while a sink fails, the relay keeps failing_since (when its
// publishes started failing), last_error and last_error_at on the sink's
// row, and clears them once a publish goes through again. A sink that
// never acknowledged anything gets a row at position 0/0 for it, which
// LoadProgress does not count as progress. The columns are optional
// (healthColumns): without them nothing is recorded.

// Health is what the relay last recorded of a failing sink.
type Health struct {
	FailingSince time.Time
	LastError    string
	LastErrorAt  time.Time
}

// LoadHealth reads the failing sinks of t.Slot, by name: none when
// progress is disabled, the table is missing or lacks the columns.
func LoadHealth(ctx context.Context, conn *pgx.Conn, t Tables) (map[string]Health, error) {
	out := map[string]Health{}
	if t.Progress == "" {
		return out, nil
	}
	if ok, err := TableExists(ctx, conn, t.Progress); err != nil || !ok {
		return out, err
	}
	if missing, err := missingColumns(ctx, conn, t.Progress, healthColumns); err != nil || len(missing) > 0 {
		return out, err
	}
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT sink, failing_since, coalesce(last_error, ''), coalesce(last_error_at, failing_since)
		FROM %s WHERE slot = $1 AND failing_since IS NOT NULL`, t.Progress), t.Slot)
	if err != nil {
		return nil, fmt.Errorf("reading progress table %s: %w", t.Progress, err)
	}
	defer rows.Close()
	for rows.Next() {
		var sink string
		var h Health
		if err := rows.Scan(&sink, &h.FailingSince, &h.LastError, &h.LastErrorAt); err != nil {
			return nil, err
		}
		out[sink] = h
	}
	return out, rows.Err()
}

// healthState is a sink's failing state as Progress keeps it.
type healthState struct {
	failing bool
	err     string // the last error, redacted
	dirty   bool
}

// Failing records that sink's publishes fail with err (redacted by the
// caller), or, for an empty err, go through again. Written with the
// positions.
func (s *Progress) Failing(sink string, err string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.health == nil {
		s.health = map[string]*healthState{}
	}
	h := s.health[sink]
	if h == nil {
		if err == "" {
			return // never recorded failing by this relay; a stale record is cleared at start (Run)
		}
		h = &healthState{}
		s.health[sink] = h
	}
	if (err != "") == h.failing && err == h.err {
		return
	}
	h.failing, h.err, h.dirty = err != "", err, true
	s.setDirty()
}

// clearHealth clears the failing state a previous relay recorded for the
// slot: this one records its own as its sinks fail.
func (s *Progress) clearHealth(ctx context.Context, conn *pgx.Conn) error {
	if ok, err := s.hasHealth(ctx, conn); err != nil || !ok {
		return err
	}
	s.mu.Lock()
	mine := []string{}
	for sink, h := range s.health {
		if h.failing {
			mine = append(mine, sink)
		}
	}
	s.mu.Unlock()
	_, err := conn.Exec(ctx, fmt.Sprintf(`UPDATE %s SET failing_since = NULL, last_error = NULL, last_error_at = NULL
		WHERE slot = $1 AND failing_since IS NOT NULL AND sink <> ALL($2)`, s.t.Progress), s.t.Slot, mine)
	if err == nil {
		s.cleared = true
	}
	return err
}

// hasHealth reports whether the progress table has the health columns
// (looked up once).
func (s *Progress) hasHealth(ctx context.Context, conn *pgx.Conn) (bool, error) {
	if s.noHealth == nil {
		missing, err := missingColumns(ctx, conn, s.t.Progress, healthColumns)
		if err != nil {
			return false, err
		}
		no := len(missing) > 0
		s.noHealth = &no
	}
	return !*s.noHealth, nil
}

// writeHealth writes the changed health of sinks; a table without the
// columns is left alone.
func (s *Progress) writeHealth(ctx context.Context, conn *pgx.Conn, batch map[string]healthState) error {
	if len(batch) == 0 {
		return nil
	}
	if ok, err := s.hasHealth(ctx, conn); err != nil || !ok {
		return err
	}
	for sink, h := range batch {
		var err error
		if h.failing {
			_, err = conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s AS p (slot, sink, commit_lsn, lsn, failing_since, last_error, last_error_at)
				VALUES ($1, $2, '0/0', '0/0', now(), $3, now())
				ON CONFLICT (slot, sink) DO UPDATE SET failing_since = coalesce(p.failing_since, now()), last_error = $3, last_error_at = now()`, s.t.Progress),
				s.t.Slot, sink, h.err)
		} else {
			_, err = conn.Exec(ctx, fmt.Sprintf(`UPDATE %s SET failing_since = NULL, last_error = NULL, last_error_at = NULL
				WHERE slot = $1 AND sink = $2`, s.t.Progress), s.t.Slot, sink)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
