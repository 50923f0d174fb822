package inbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Beginner is what an Inbox needs from pgx: *pgxpool.Pool satisfies it, and
// so does *pgx.Conn (which, unlike the pool, is not safe for concurrent use,
// so an Inbox over one must not be used concurrently either).
type Beginner interface {
	// Begin starts a transaction in the database's default isolation level.
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Inbox records processed message ids with pgx. See the package
// documentation for the guarantees. An Inbox is safe for concurrent use
// when its Beginner is (a *pgxpool.Pool is); each Process call takes one
// connection for the length of its transaction.
type Inbox struct {
	db Beginner
	c  *core
}

// New returns an Inbox that records ids in opts.Table through db. It checks
// opts (errors wrap ErrInvalidTable or ErrInvalidOptions) but does not
// touch the database; call EnsureTable to create the table.
func New(db Beginner, opts Options) (*Inbox, error) {
	c, err := newCore(opts)
	if err != nil {
		return nil, err
	}
	return &Inbox{db: db, c: c}, nil
}

// EnsureTable creates the inbox table and its processed_at index if they
// are missing (the statements of DDL). It is idempotent and safe to run
// from several processes at once: a transaction-scoped advisory lock on
// the table's name serializes them.
func (ib *Inbox) EnsureTable(ctx context.Context) error {
	tx, err := ib.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("inbox: creating table %s: %w", ib.c.table, err)
	}
	defer tx.Rollback(ctx) // no-op after Commit
	if _, err := tx.Exec(ctx, ib.c.lockSQL, ib.c.table); err != nil {
		return fmt.Errorf("inbox: creating table %s: taking advisory lock: %w", ib.c.table, err)
	}
	for _, stmt := range ib.c.ddl {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("inbox: creating table %s: %w", ib.c.table, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("inbox: creating table %s: commit: %w", ib.c.table, err)
	}
	return nil
}

// Process runs effect for message msgID unless the id is already recorded,
// recording it and effect's changes in one transaction:
//
//   - It inserts msgID. If another delivery of the same id is being
//     processed at the same moment, the insert waits for that transaction:
//     if it commits, Process rolls back and returns Duplicate; if it rolls
//     back, Process goes on as the first.
//   - If the id was already recorded, Process rolls back without calling
//     effect and returns Duplicate.
//   - Otherwise it calls effect with the transaction and commits, returning
//     Processed.
//
// If effect returns an error, the transaction rolls back: nothing is
// recorded, so a redelivery processes the message again. Process then
// returns an error wrapping effect's. If effect panics, Process recovers
// the panic, rolls back the same way and returns an error wrapping a
// *PanicError (errors.Is(err, ErrPanicked)) with the panic value and
// stack: to the caller, and to a receive loop, a panicking effect is a
// failing effect, retried or given back to the broker like one. Effect
// must do its database work through tx and must not commit or roll it
// back; ctx is the one given to Process. A nil effect only records the
// id.
//
// Acknowledge (complete, commit the offset of) the broker message only
// after Process returns Processed or Duplicate; on any error leave it to
// be redelivered. An error from the commit itself may hide a commit that
// happened; the redelivery then returns Duplicate. Process is safe for
// concurrent use (see Inbox).
func (ib *Inbox) Process(ctx context.Context, msgID string, effect func(ctx context.Context, tx pgx.Tx) error) (res Result, err error) {
	ctx, span := ib.c.startProcess(ctx, msgID)
	defer func() { endProcess(span, res, err) }()
	if msgID == "" {
		return 0, ErrEmptyID
	}
	tx, err := ib.db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("inbox: message %q: beginning transaction: %w", msgID, err)
	}
	defer tx.Rollback(ctx) // no-op after Commit
	tag, err := tx.Exec(ctx, ib.c.insertSQL, msgID)
	if err != nil {
		return 0, fmt.Errorf("inbox: message %q: recording id in %s: %w", msgID, ib.c.table, err)
	}
	if tag.RowsAffected() == 0 {
		return Duplicate, nil
	}
	if effect != nil {
		if err := runEffect(func() error { return effect(ctx, tx) }); err != nil {
			return 0, fmt.Errorf("inbox: message %q: effect failed, rolled back: %w", msgID, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("inbox: message %q: commit: %w", msgID, err)
	}
	return Processed, nil
}

// Cleanup deletes the ids processed more than Options.Retention ago and
// returns how many it deleted. It deletes in statements of at most
// Options.CleanupBatch ids, each its own short transaction, until one
// deletes fewer. It never waits for ids that others hold locked (SKIP
// LOCKED): those are left for a later run. Process never waits for
// Cleanup either, except when it records an expired id in the moment one
// statement is deleting it; it then waits for that statement and, as the
// id is past retention anyway, processes the message as new. On error or
// when ctx ends Cleanup returns what it deleted so far with the error. Run
// it periodically (hourly or daily is plenty); it is safe to run
// concurrently with Process and with other Cleanup calls.
func (ib *Inbox) Cleanup(ctx context.Context) (deleted int64, err error) {
	return ib.c.cleanup(ctx, func(ctx context.Context, stmt string, args ...any) (int64, error) {
		tx, err := ib.db.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback(ctx)
		tag, err := tx.Exec(ctx, stmt, args...)
		if err != nil {
			return 0, err
		}
		return tag.RowsAffected(), tx.Commit(ctx)
	})
}
