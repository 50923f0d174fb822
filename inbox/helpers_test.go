package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/walpost/walpost/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// execFunc runs a statement in the transaction of a Process call.
type execFunc func(sql string, args ...any) error

// testInbox hides the driver, so every guarantee is checked for both the
// pgx Inbox and the database/sql SQLInbox.
type testInbox interface {
	ensureTable(ctx context.Context) error
	process(ctx context.Context, id string, effect func(ctx context.Context, exec execFunc) error) (Result, error)
	cleanup(ctx context.Context) (int64, error)
	core() *core
	close()
}

type pgxInbox struct {
	*Inbox
	pool *pgxpool.Pool
}

func (p pgxInbox) ensureTable(ctx context.Context) error { return p.EnsureTable(ctx) }
func (p pgxInbox) cleanup(ctx context.Context) (int64, error) {
	return p.Cleanup(ctx)
}
func (p pgxInbox) core() *core { return p.c }
func (p pgxInbox) close()      { p.pool.Close() }
func (p pgxInbox) process(ctx context.Context, id string, effect func(context.Context, execFunc) error) (Result, error) {
	if effect == nil {
		return p.Process(ctx, id, nil)
	}
	return p.Process(ctx, id, func(ctx context.Context, tx pgx.Tx) error {
		return effect(ctx, func(s string, args ...any) error { _, err := tx.Exec(ctx, s, args...); return err })
	})
}

type sqlInbox struct {
	*SQLInbox
	db *sql.DB
}

func (s sqlInbox) ensureTable(ctx context.Context) error { return s.EnsureTable(ctx) }
func (s sqlInbox) cleanup(ctx context.Context) (int64, error) {
	return s.Cleanup(ctx)
}
func (s sqlInbox) core() *core { return s.c }
func (s sqlInbox) close()      { s.db.Close() }
func (s sqlInbox) process(ctx context.Context, id string, effect func(context.Context, execFunc) error) (Result, error) {
	if effect == nil {
		return s.Process(ctx, id, nil)
	}
	return s.Process(ctx, id, func(ctx context.Context, tx *sql.Tx) error {
		return effect(ctx, func(q string, args ...any) error { _, err := tx.ExecContext(ctx, q, args...); return err })
	})
}

// variant opens an inbox of one driver with at most maxConns connections;
// it is closed when the test ends.
type variant struct {
	name string
	open func(t *testing.T, url string, opts Options, maxConns int) testInbox
}

var variants = []variant{
	{"pgx", func(t *testing.T, url string, opts Options, maxConns int) testInbox {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = int32(maxConns)
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		ib, err := New(pool, opts)
		if err != nil {
			t.Fatal(err)
		}
		return pgxInbox{ib, pool}
	}},
	{"database/sql", func(t *testing.T, url string, opts Options, maxConns int) testInbox {
		db, err := sql.Open("pgx", url)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(maxConns)
		db.SetMaxIdleConns(maxConns)
		t.Cleanup(func() { db.Close() })
		ib, err := NewSQL(db, opts)
		if err != nil {
			t.Fatal(err)
		}
		return sqlInbox{ib, db}
	}},
}

// fixture is a test's own inbox table and effect counter, and a connection
// to observe them.
type fixture struct {
	url     string
	table   string // inbox table, schema-qualified
	counter string // table with one row, n: how many effects committed
	obs     *pgx.Conn
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	url := pgtest.URL(t)
	f := &fixture{
		url:     url,
		table:   "public." + pgtest.Name(t, "inbox"),
		counter: pgx.Identifier{"public", pgtest.Name(t, "effects")}.Sanitize(),
	}
	pgtest.Exec(t, url,
		`CREATE TABLE `+f.counter+` (n int NOT NULL)`,
		`INSERT INTO `+f.counter+` VALUES (0)`)
	f.obs = pgtest.Connect(t, url)
	return f
}

// open opens an inbox of variant v on the fixture's table and creates the
// table.
func (f *fixture) open(t *testing.T, v variant, opts Options, maxConns int) testInbox {
	t.Helper()
	opts.Table = f.table
	ib := v.open(t, f.url, opts, maxConns)
	if err := ib.ensureTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	return ib
}

// increment is the effect under test: it adds one to the counter.
func (f *fixture) increment(exec execFunc) error {
	return exec(`UPDATE ` + f.counter + ` SET n = n + 1`)
}

// effects returns how many effects committed.
func (f *fixture) effects(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.obs.QueryRow(context.Background(), `SELECT n FROM `+f.counter).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// count returns the number of inbox rows matching where (SQL, may be "true").
func (f *fixture) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	q := fmt.Sprintf(`SELECT count(*) FROM %s WHERE %s`, f.ident(), where)
	if err := f.obs.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *fixture) ident() string {
	ident, err := parseTable(f.table)
	if err != nil {
		panic(err)
	}
	return ident.Sanitize()
}

// waitingInserts returns how many sessions are blocked on a lock while
// running the inbox INSERT of ib.
func (f *fixture) waitingInserts(t *testing.T, ib testInbox) int {
	var n int
	err := f.obs.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query = $1`,
		ib.core().insertSQL).Scan(&n)
	if err != nil {
		t.Error(err)
	}
	return n
}
