// Package inboxtest holds what the tests of the inbox's receive loops
// (inbox/inboxkafka, inbox/inboxsb and the loops after them) share: a
// test's own inbox table and effect counter in the test cluster of
// internal/pgtest, and an inbox of each driver (pgx and database/sql)
// over them, so that every loop is tested with both.
//
// A test package that uses it runs pgtest.Main from its TestMain. The
// inbox package's own tests cannot import this package (it imports
// inbox) and keep their helpers in inbox/helpers_test.go.
package inboxtest

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx" for database/sql

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/internal/pgtest"
)

// Exec runs one statement in the transaction of a Process call, whatever
// the driver.
type Exec func(sql string, args ...any) error

// Inbox is one test inbox: exactly one of PGX and SQL is set. It is also
// an inbox.Processor[Exec], for loops tested without caring about the
// driver; pass PGX or SQL to test a loop with the driver's own
// transaction type.
type Inbox struct {
	PGX *inbox.Inbox
	SQL *inbox.SQLInbox
}

// Process runs effect through the underlying inbox, giving it an Exec on
// the transaction.
func (ib *Inbox) Process(ctx context.Context, id string, effect func(ctx context.Context, exec Exec) error) (inbox.Result, error) {
	if ib.PGX != nil {
		return ib.PGX.Process(ctx, id, func(ctx context.Context, tx pgx.Tx) error {
			return effect(ctx, func(s string, args ...any) error { _, err := tx.Exec(ctx, s, args...); return err })
		})
	}
	return ib.SQL.Process(ctx, id, func(ctx context.Context, tx *sql.Tx) error {
		return effect(ctx, func(q string, args ...any) error { _, err := tx.ExecContext(ctx, q, args...); return err })
	})
}

// Driver opens an inbox of one driver with at most maxConns connections;
// it is closed when the test ends.
type Driver struct {
	Name string
	Open func(t testing.TB, url string, opts inbox.Options, maxConns int) *Inbox
}

// Drivers are the two inboxes every loop is tested with.
var Drivers = []Driver{
	{"pgx", func(t testing.TB, url string, opts inbox.Options, maxConns int) *Inbox {
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
		ib, err := inbox.New(pool, opts)
		if err != nil {
			t.Fatal(err)
		}
		return &Inbox{PGX: ib}
	}},
	{"database/sql", func(t testing.TB, url string, opts inbox.Options, maxConns int) *Inbox {
		db, err := sql.Open("pgx", url)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(maxConns)
		db.SetMaxIdleConns(maxConns)
		t.Cleanup(func() { db.Close() })
		ib, err := inbox.NewSQL(db, opts)
		if err != nil {
			t.Fatal(err)
		}
		return &Inbox{SQL: ib}
	}},
}

// Fixture is a test's own inbox table and effect counter, and a
// connection to observe them. Its methods fail the test on error; they
// share one connection, so call them from one goroutine at a time.
type Fixture struct {
	URL     string
	Table   string // the inbox table, schema-qualified, unquoted
	Counter string // quoted name of a one-row table (n int): how many effects committed
	quoted  string // Table, quoted for SQL
	obs     *pgx.Conn
}

// NewFixture creates the test's counter table (the inbox table is created
// by Open).
func NewFixture(t testing.TB) *Fixture {
	t.Helper()
	url := pgtest.URL(t)
	name := pgtest.Name(t, "inbox")
	f := &Fixture{
		URL:     url,
		Table:   "public." + name,
		Counter: pgx.Identifier{"public", pgtest.Name(t, "effects")}.Sanitize(),
		quoted:  pgx.Identifier{"public", name}.Sanitize(),
	}
	pgtest.Exec(t, url,
		`CREATE TABLE `+f.Counter+` (n int NOT NULL)`,
		`INSERT INTO `+f.Counter+` VALUES (0)`)
	f.obs = pgtest.Connect(t, url)
	return f
}

// Open opens an inbox of driver d on the fixture's table and creates the
// table.
func (f *Fixture) Open(t testing.TB, d Driver, opts inbox.Options, maxConns int) *Inbox {
	t.Helper()
	opts.Table = f.Table
	ib := d.Open(t, f.URL, opts, maxConns)
	var err error
	if ib.PGX != nil {
		err = ib.PGX.EnsureTable(context.Background())
	} else {
		err = ib.SQL.EnsureTable(context.Background())
	}
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

// Increment is the effect under test: it adds one to the counter.
func (f *Fixture) Increment(exec Exec) error {
	return exec(`UPDATE ` + f.Counter + ` SET n = n + 1`)
}

// Effects returns how many effects committed.
func (f *Fixture) Effects(t testing.TB) int {
	t.Helper()
	var n int
	if err := f.obs.QueryRow(context.Background(), `SELECT n FROM `+f.Counter).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Count returns the number of inbox rows matching where (SQL; "true" for
// all).
func (f *Fixture) Count(t testing.TB, where string, args ...any) int {
	t.Helper()
	var n int
	q := fmt.Sprintf(`SELECT count(*) FROM %s WHERE %s`, f.quoted, where)
	if err := f.obs.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
