package inbox

import (
	"context"
	"database/sql"
	"fmt"
)

// SQLBeginner is what an SQLInbox needs from database/sql: *sql.DB
// satisfies it, and so does *sql.Conn (not safe for concurrent use). The
// driver must be PostgreSQL's, e.g. "pgx" from
// github.com/jackc/pgx/v5/stdlib.
type SQLBeginner interface {
	// BeginTx starts a transaction; with nil opts, in the database's
	// default isolation level.
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// SQLInbox is Inbox for database/sql: the effect gets a *sql.Tx. It shares
// Inbox's SQL and guarantees. It is safe for concurrent use when its
// SQLBeginner is (a *sql.DB is).
type SQLInbox struct {
	db SQLBeginner
	c  *core
}

// NewSQL returns an SQLInbox that records ids in opts.Table through db. It
// checks opts like New and does not touch the database.
func NewSQL(db SQLBeginner, opts Options) (*SQLInbox, error) {
	c, err := newCore(opts)
	if err != nil {
		return nil, err
	}
	return &SQLInbox{db: db, c: c}, nil
}

// EnsureTable is Inbox.EnsureTable for database/sql.
func (ib *SQLInbox) EnsureTable(ctx context.Context) error {
	tx, err := ib.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("inbox: creating table %s: %w", ib.c.table, err)
	}
	defer tx.Rollback() // no-op after Commit
	if _, err := tx.ExecContext(ctx, ib.c.lockSQL, ib.c.table); err != nil {
		return fmt.Errorf("inbox: creating table %s: taking advisory lock: %w", ib.c.table, err)
	}
	for _, stmt := range ib.c.ddl {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("inbox: creating table %s: %w", ib.c.table, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("inbox: creating table %s: commit: %w", ib.c.table, err)
	}
	return nil
}

// Process is Inbox.Process for database/sql: effect gets the *sql.Tx, and
// must not commit or roll it back. A panicking effect is rolled back and
// reported as an error wrapping ErrPanicked, as by Inbox.Process.
func (ib *SQLInbox) Process(ctx context.Context, msgID string, effect func(ctx context.Context, tx *sql.Tx) error) (result Result, err error) {
	ctx, span := ib.c.startProcess(ctx, msgID)
	defer func() { endProcess(span, result, err) }()
	if msgID == "" {
		return 0, ErrEmptyID
	}
	tx, err := ib.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("inbox: message %q: beginning transaction: %w", msgID, err)
	}
	defer tx.Rollback() // no-op after Commit
	res, err := tx.ExecContext(ctx, ib.c.insertSQL, msgID)
	if err != nil {
		return 0, fmt.Errorf("inbox: message %q: recording id in %s: %w", msgID, ib.c.table, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("inbox: message %q: recording id in %s: %w", msgID, ib.c.table, err)
	}
	if n == 0 {
		return Duplicate, nil
	}
	if effect != nil {
		if err := runEffect(func() error { return effect(ctx, tx) }); err != nil {
			return 0, fmt.Errorf("inbox: message %q: effect failed, rolled back: %w", msgID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("inbox: message %q: commit: %w", msgID, err)
	}
	return Processed, nil
}

// Cleanup is Inbox.Cleanup for database/sql.
func (ib *SQLInbox) Cleanup(ctx context.Context) (deleted int64, err error) {
	return ib.c.cleanup(ctx, func(ctx context.Context, stmt string, args ...any) (int64, error) {
		tx, err := ib.db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback()
		res, err := tx.ExecContext(ctx, stmt, args...)
		if err != nil {
			return 0, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		return n, tx.Commit()
	})
}
