package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	sharedOnce sync.Once
	shared     *Cluster
	sharedErr  error

	namedMu sync.Mutex
	named   = map[string]*namedCluster{}
)

type namedCluster struct {
	once sync.Once
	c    *Cluster
	err  error
}

// Main runs the tests of a package and stops the shared clusters
// afterwards. Use it from TestMain:
// func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }.
func Main(m *testing.M) int {
	code := m.Run()
	if shared != nil {
		if err := shared.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	namedMu.Lock()
	defer namedMu.Unlock()
	for _, n := range named {
		if n.c != nil {
			if err := n.c.Close(); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}
	}
	return code
}

// SharedCluster returns the test binary's throwaway cluster, starting it on
// first use. It returns nil (and no error) when WALPOST_TEST_DATABASE_URL is
// set, since tests then use that server.
func SharedCluster(tb testing.TB) *Cluster {
	tb.Helper()
	if os.Getenv("WALPOST_TEST_DATABASE_URL") != "" {
		return nil
	}
	sharedOnce.Do(func() {
		shared, sharedErr = Start(Options{})
	})
	if sharedErr != nil {
		startFailed(tb, sharedErr)
	}
	return shared
}

// NamedCluster returns the test binary's throwaway cluster called name,
// started with opts on first use and stopped by Main, whether or not
// WALPOST_TEST_DATABASE_URL is set: for a group of tests that need
// settings the shared cluster must not have (max_slot_wal_keep_size) and
// can share a cluster among themselves, instead of starting one each. A
// later call with the same name gets the same cluster, whatever its opts.
// Like SharedCluster, it skips the test under -short when no PostgreSQL is
// installed.
func NamedCluster(tb testing.TB, name string, opts Options) *Cluster {
	tb.Helper()
	namedMu.Lock()
	n := named[name]
	if n == nil {
		n = &namedCluster{}
		named[name] = n
	}
	namedMu.Unlock()
	n.once.Do(func() { n.c, n.err = Start(opts) })
	if n.err != nil {
		startFailed(tb, n.err)
	}
	return n.c
}

// StartCluster starts a throwaway cluster of the test's own (for a test
// that restarts, reconfigures or replicates its server), stopped and
// removed when the test ends. Like SharedCluster, it skips the test under
// -short when no PostgreSQL is installed.
func StartCluster(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	c, err := Start(opts)
	if err != nil {
		startFailed(tb, err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// startFailed ends a test whose throwaway cluster did not start: skipped
// under -short when PostgreSQL is not installed (go test -short runs the
// unit tests anywhere), failed otherwise, saying what to install.
func startFailed(tb testing.TB, err error) {
	tb.Helper()
	if errors.Is(err, ErrVersionUnavailable) {
		tb.Skipf("skipped: %v", err)
	}
	if errors.Is(err, ErrNoServer) {
		if testing.Short() {
			tb.Skipf("skipped under -short: this test needs PostgreSQL: %v", err)
		}
		tb.Fatalf("starting throwaway PostgreSQL: %v (go test -short skips the tests that need it)", err)
	}
	tb.Fatalf("starting throwaway PostgreSQL: %v", err)
}

// URL returns the URL of a database with wal_level=logical for tests:
// WALPOST_TEST_DATABASE_URL when set, else the shared throwaway cluster's
// "postgres" database.
func URL(tb testing.TB) string {
	tb.Helper()
	if u := os.Getenv("WALPOST_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return SharedCluster(tb).URL("postgres")
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// Name returns a unique SQL identifier for the test, e.g. for its own table,
// slot and publication: prefix, part of the test's name and a random suffix.
func Name(tb testing.TB, prefix string) string {
	tb.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	base := nonIdent.ReplaceAllString(strings.ToLower(tb.Name()), "_")
	base = strings.TrimPrefix(base, "testintegration")
	base = strings.TrimPrefix(base, "test")
	base = strings.Trim(base, "_")
	if len(base) > 30 {
		base = base[len(base)-30:]
	}
	return fmt.Sprintf("%s_%s_%s", prefix, base, hex.EncodeToString(b[:]))
}

// Connect opens a connection to url, closed when the test ends.
func Connect(tb testing.TB, url string) *pgx.Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("connecting to %s: %v", url, err)
	}
	tb.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Exec runs SQL statements on url and fails the test on error.
func Exec(tb testing.TB, url string, sqls ...string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("connecting to %s: %v", url, err)
	}
	defer conn.Close(context.Background())
	for _, s := range sqls {
		if _, err := conn.Exec(context.Background(), s); err != nil {
			tb.Fatalf("exec %q: %v", s, err)
		}
	}
}

// DropSlot drops replication slot slot of url's database, first waiting
// (up to 30 s) for its WAL sender to end: a relay that exited has closed
// its connection, but the server ends the WAL sender a moment later, and
// pg_drop_replication_slot refuses a slot still active.
func DropSlot(tb testing.TB, url, slot string) {
	tb.Helper()
	conn := Connect(tb, url)
	ctx := context.Background()
	Await(tb, 30*time.Second, "the WAL sender of slot "+slot+" to end", func() bool {
		var active bool
		if err := conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active); err != nil {
			tb.Fatalf("reading slot %s: %v", slot, err)
		}
		return !active
	})
	if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot); err != nil {
		tb.Fatalf("dropping slot %s: %v", slot, err)
	}
}

// Await polls cond like WaitFor and fails the test, naming what it waited
// for, when timeout passes first.
func Await(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !WaitFor(timeout, cond) {
		tb.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}
