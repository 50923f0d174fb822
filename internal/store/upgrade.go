package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Upgrading state tables made by an older walpost (docs/operations.md, "Upgrading").
//
// The progress table gained seq and commit_time, the dead-letter table
// resent_at and seq, and the dead-letter key became (slot, lsn, seq,
// sink): rows written by one multi-insert WAL record (COPY) share an LSN,
// so an LSN alone named several rows (docs/design.md, "A message's
// position"). Existing rows get seq 0. For the progress table that is
// exact: a saved position (commit, lsn) was written when a sink
// acknowledged a message at lsn, so at least the first row at lsn was
// acknowledged; the rows after it at the same lsn, which the older
// walpost took for acknowledged, are sent again. For the dead-letter
// table it keeps each row's key unique, since the old key was.

// deadLetterKey is the dead-letter table's primary key.
var deadLetterKey = []string{"slot", "lsn", "seq", "sink"}

// columnDDL adds each column a table of an older walpost may lack.
var (
	progressColumns = [][2]string{
		{"seq", "bigint NOT NULL DEFAULT 0"},
		{"commit_time", "timestamptz"},
	}
	// healthColumns record a failing sink for cdc status (health.go).
	// Optional: cdc init adds them to an older table, cdc run when its
	// role owns the table; without them the relay records no failure and
	// runs as before.
	healthColumns = [][2]string{
		{"failing_since", "timestamptz"},
		{"last_error", "text"},
		{"last_error_at", "timestamptz"},
	}
	deadLetterColumns = [][2]string{
		{"resent_at", "timestamptz"},
		{"seq", "bigint NOT NULL DEFAULT 0"},
		{"hold_key", "text"},
		{"held_behind", "text"},
	}
)

// pending lists what table (quoted, existing) lacks of the current
// layout: "column seq", "primary key (slot, lsn, seq, sink)".
func pending(ctx context.Context, conn *pgx.Conn, table string, deadLetter bool) ([]string, error) {
	cols := progressColumns
	if deadLetter {
		cols = deadLetterColumns
	}
	var have []string
	err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(attname::text), '{}') FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`, table).Scan(&have)
	if err != nil {
		return nil, fmt.Errorf("reading the columns of %s: %w", table, err)
	}
	var out []string
	for _, c := range cols {
		if !slices.Contains(have, c[0]) {
			out = append(out, "column "+c[0])
		}
	}
	if deadLetter {
		key, _, err := primaryKey(ctx, conn, table)
		if err != nil {
			return nil, err
		}
		if !slices.Equal(key, deadLetterKey) {
			out = append(out, "primary key ("+strings.Join(deadLetterKey, ", ")+")")
		}
	}
	return out, nil
}

// primaryKey returns the columns of table's primary key, in order, and
// the constraint's name ("" when there is none).
func primaryKey(ctx context.Context, conn *pgx.Conn, table string) ([]string, string, error) {
	var cols []string
	var name string
	err := conn.QueryRow(ctx, `SELECT c.conname::text, array_agg(a.attname::text ORDER BY k.ord)
		FROM pg_constraint c
		CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
		WHERE c.conrelid = to_regclass($1) AND c.contype = 'p'
		GROUP BY c.conname`, table).Scan(&name, &cols)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("reading the primary key of %s: %w", table, err)
	}
	return cols, name, nil
}

// upgrade brings table (quoted, existing) to the current layout in one
// transaction and returns what it changed; it changes nothing, and needs
// no ownership, when the table is current.
func upgrade(ctx context.Context, conn *pgx.Conn, table string, deadLetter bool) ([]string, error) {
	todo, err := pending(ctx, conn, table, deadLetter)
	if err != nil {
		return nil, err
	}
	cols := progressColumns
	if deadLetter {
		cols = deadLetterColumns
	} else {
		missing, err := missingColumns(ctx, conn, table, healthColumns)
		if err != nil {
			return nil, err
		}
		for _, c := range missing {
			todo = append(todo, "column "+c)
		}
		cols = append(slices.Clone(cols), healthColumns...)
	}
	if len(todo) == 0 {
		return nil, nil
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, c := range cols {
			if _, err := tx.Exec(ctx, fmt.Sprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s %s", table, c[0], c[1])); err != nil {
				return err
			}
		}
		if !deadLetter {
			return nil
		}
		key, name, err := primaryKey(ctx, conn, table)
		if err != nil || slices.Equal(key, deadLetterKey) {
			return err
		}
		if name != "" {
			if _, err := tx.Exec(ctx, fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s", table, pgx.Identifier{name}.Sanitize())); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (%s)", table, strings.Join(deadLetterKey, ", ")))
		return err
	})
	if err != nil {
		return nil, err
	}
	return todo, nil
}

// checkUpgraded makes sure that table (quoted; skipped when missing) has
// the current layout. `cdc run` upgrades it itself when its role may
// (the table's owner); otherwise it stops before streaming, with the
// command that upgrades it: nothing is read from the slot meanwhile.
func checkUpgraded(ctx context.Context, conn *pgx.Conn, table, name, field string, deadLetter bool) error {
	if table == "" {
		return nil
	}
	if ok, err := TableExists(ctx, conn, table); err != nil || !ok {
		return err
	}
	todo, err := pending(ctx, conn, table, deadLetter)
	if err != nil {
		return err
	}
	if len(todo) == 0 {
		if !deadLetter {
			addHealthColumns(ctx, conn, table)
		}
		return nil
	}
	if _, err := upgrade(ctx, conn, table, deadLetter); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == "42501" || pe.Code == "25006") { // not the owner; a read-only transaction
			return fmt.Errorf("%w: %s: table %s was made by an older walpost and lacks %s, which this version needs "+
				"(rows written by one COPY share an LSN and are told apart by seq); run 'cdc init' with this config as the table's owner to add them "+
				"(existing rows are kept; nothing has been read from the slot)", ErrUpgrade, field, name, strings.Join(todo, ", "))
		}
		return fmt.Errorf("%s: upgrading table %s (it lacks %s): %w", field, name, strings.Join(todo, ", "), err)
	}
	return nil
}

// Outdated lists, per state table of t that exists and was made by an
// older walpost, what it lacks ("column seq"), read-only: for `cdc
// status`, which says to run `cdc init`.
func Outdated(ctx context.Context, conn *pgx.Conn, t Tables) (map[string][]string, error) {
	out := map[string][]string{}
	for _, x := range []struct {
		table, name string
		deadLetter  bool
	}{{t.Progress, t.ProgressName, false}, {t.DeadLetter, t.DeadLetterName, true}} {
		if x.table == "" {
			continue
		}
		if ok, err := TableExists(ctx, conn, x.table); err != nil || !ok {
			if err != nil {
				return nil, err
			}
			continue
		}
		todo, err := pending(ctx, conn, x.table, x.deadLetter)
		if err != nil {
			return nil, err
		}
		if len(todo) > 0 {
			out[x.name] = todo
		}
	}
	return out, nil
}

// missingColumns returns the names of cols that table (quoted, existing)
// lacks.
func missingColumns(ctx context.Context, conn *pgx.Conn, table string, cols [][2]string) ([]string, error) {
	var have []string
	err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(attname::text), '{}') FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`, table).Scan(&have)
	if err != nil {
		return nil, fmt.Errorf("reading the columns of %s: %w", table, err)
	}
	var out []string
	for _, c := range cols {
		if !slices.Contains(have, c[0]) {
			out = append(out, c[0])
		}
	}
	return out, nil
}

// addHealthColumns adds the optional health columns to a progress table
// made before them, when the role may (its owner); otherwise the table
// stays as it is and the relay records no sink failure there (cdc status
// says to run cdc init).
func addHealthColumns(ctx context.Context, conn *pgx.Conn, table string) {
	missing, err := missingColumns(ctx, conn, table, healthColumns)
	if err != nil || len(missing) == 0 {
		return
	}
	_ = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, c := range healthColumns {
			if _, err := tx.Exec(ctx, fmt.Sprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s %s", table, c[0], c[1])); err != nil {
				return err
			}
		}
		return nil
	})
}

// MissingHealth reports whether the progress table of t exists and lacks
// the columns that record a failing sink (cdc status advises cdc init).
func MissingHealth(ctx context.Context, conn *pgx.Conn, t Tables) (bool, error) {
	if t.Progress == "" {
		return false, nil
	}
	if ok, err := TableExists(ctx, conn, t.Progress); err != nil || !ok {
		return false, err
	}
	missing, err := missingColumns(ctx, conn, t.Progress, healthColumns)
	return len(missing) > 0, err
}
