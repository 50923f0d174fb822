package inbox

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// DefaultRetention is how long Cleanup keeps a processed message id when
// Options.Retention is zero. See the package documentation for why.
const DefaultRetention = 30 * 24 * time.Hour

// DefaultCleanupBatch is how many ids one Cleanup statement deletes at most
// when Options.CleanupBatch is zero.
const DefaultCleanupBatch = 1000

// Options configures an inbox. The zero value is usable.
type Options struct {
	// Table is the inbox table, "table" or "schema.table", taken literally
	// (no case folding, no quotes). Empty means DefaultTable. EnsureTable
	// creates it; DDL gives its definition.
	Table string
	// Retention is how long Cleanup keeps processed ids: a copy of a
	// message delivered again after that runs its effect again. Zero means
	// DefaultRetention (30 days); it must not be negative.
	Retention time.Duration
	// CleanupBatch is the most ids one Cleanup statement deletes, so that
	// no statement holds many row locks or runs long. Zero means
	// DefaultCleanupBatch; it must not be negative.
	CleanupBatch int
	// TracerProvider records the span of each Process call ("process
	// <table>", a child of the message's trace: ContextWithTraceparent);
	// nil: OpenTelemetry's global provider (otel.GetTracerProvider), which
	// records nothing until an OpenTelemetry SDK is installed.
	TracerProvider trace.TracerProvider
}

// core is what the pgx and database/sql inboxes share: validated options
// and the SQL text.
type core struct {
	table      string // as configured, for messages
	retention  time.Duration
	batch      int
	ddl        []string
	lockSQL    string // serializes EnsureTable across processes
	insertSQL  string
	cleanupSQL string
	tracer     trace.Tracer

	// afterCleanupBatch, when set (by tests), is called with the number of
	// ids each Cleanup statement deleted.
	afterCleanupBatch func(deleted int64)
}

func newCore(opts Options) (*core, error) {
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	ident, err := parseTable(opts.Table)
	if err != nil {
		return nil, fmt.Errorf("Options.Table: %w", err)
	}
	switch {
	case opts.Retention < 0:
		return nil, fmt.Errorf("%w: Options.Retention: negative (%v)", ErrInvalidOptions, opts.Retention)
	case opts.Retention == 0:
		opts.Retention = DefaultRetention
	}
	switch {
	case opts.CleanupBatch < 0:
		return nil, fmt.Errorf("%w: Options.CleanupBatch: negative (%d)", ErrInvalidOptions, opts.CleanupBatch)
	case opts.CleanupBatch == 0:
		opts.CleanupBatch = DefaultCleanupBatch
	}
	t := ident.Sanitize()
	return &core{
		table:     opts.Table,
		retention: opts.Retention,
		batch:     opts.CleanupBatch,
		ddl:       ddlStatements(opts.Table),
		lockSQL:   `SELECT pg_advisory_xact_lock(hashtext($1))`,
		tracer:    tracerOf(opts.TracerProvider),
		// ON CONFLICT DO NOTHING waits for a concurrent transaction that
		// inserted the same id: if it commits, this reports 0 rows; if it
		// rolls back, this inserts.
		insertSQL: `INSERT INTO ` + t + ` (id) VALUES ($1) ON CONFLICT (id) DO NOTHING`,
		// SKIP LOCKED: never wait for, or make wait, anyone else touching
		// an old id; what is skipped goes in a later run.
		cleanupSQL: `DELETE FROM ` + t + ` WHERE id IN (SELECT id FROM ` + t +
			` WHERE processed_at < now() - make_interval(secs => $1) LIMIT $2 FOR UPDATE SKIP LOCKED)`,
	}, nil
}

// cleanup runs deleteBatch until a batch deletes fewer than c.batch ids.
func (c *core) cleanup(ctx context.Context, deleteBatch func(ctx context.Context, stmt string, args ...any) (int64, error)) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("inbox: cleanup of %s stopped after %d ids: %w", c.table, total, err)
		}
		n, err := deleteBatch(ctx, c.cleanupSQL, c.retention.Seconds(), c.batch)
		if err != nil {
			return total, fmt.Errorf("inbox: cleanup of %s failed after %d ids: %w", c.table, total, err)
		}
		total += n
		if c.afterCleanupBatch != nil {
			c.afterCleanupBatch(n)
		}
		if n < int64(c.batch) {
			return total, nil
		}
	}
}

// Result says what Process did with a message.
type Result int

const (
	// Processed means the effect ran and committed with the message id.
	Processed Result = iota + 1
	// Duplicate means the message id was already recorded, by an earlier
	// delivery or a concurrent one that committed first; the effect did
	// not run. Acknowledge the message as for Processed.
	Duplicate
)

// String returns "processed", "duplicate", or "Result(n)" for the zero
// value returned with errors and for unknown values.
func (r Result) String() string {
	switch r {
	case Processed:
		return "processed"
	case Duplicate:
		return "duplicate"
	}
	return fmt.Sprintf("Result(%d)", int(r))
}
