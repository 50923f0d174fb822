package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// PostgreSQL stopping or restarting under a running relay, on a cluster
// of the test's own (docs/design.md, "Error policy"): the relay lets the
// server stop, and goes on once it is back, without exiting and without
// losing a row.

// restartSetup is a relay on a cluster of the test's own with a file
// sink: its outbox, config, output file, and a connection that comes
// back after a restart.
type restartSetup struct {
	cluster *pgtest.Cluster
	url     string
	ob      relaytest.Outbox
	cfg     string
	out     string
	conn    *pgx.Conn
}

// newRestartSetup makes the outbox (with a sent_at column when sentAt)
// and the config (extra at its top level); the relay reconnects within
// a second.
func newRestartSetup(t *testing.T, sentAt bool, extra string) *restartSetup {
	cluster := pgtest.StartCluster(t, pgtest.Options{})
	s := &restartSetup{cluster: cluster, url: cluster.URL("postgres")}
	s.ob = relaytest.NewOutbox(t, s.url)
	if sentAt {
		pgtest.Exec(t, s.url, "ALTER TABLE "+s.ob.Table+" ADD COLUMN sent_at timestamptz")
		extra += "\ncolumns: {id: id, type: type, key: key, payload: payload, headers: headers, sent_at: sent_at}"
	}
	s.out = filepath.Join(t.TempDir(), "out.jsonl")
	s.cfg = s.ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s, fsync: false}", s.out), extra)
	b, err := os.ReadFile(s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.cfg, []byte(strings.Replace(string(b), "postgres:\n", "postgres:\n  reconnect_backoff: 1s\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	s.conn = pgtest.Connect(t, s.url)
	t.Cleanup(func() { s.conn.Close(context.Background()) })
	return s
}

// query runs a one-row query, connecting again when the server restarted.
func (s *restartSetup) query(t *testing.T, sql string, dest ...any) error {
	if s.conn.IsClosed() || s.conn.Ping(context.Background()) != nil {
		s.conn.Close(context.Background())
		c, err := pgx.Connect(context.Background(), s.url)
		if err != nil {
			return err
		}
		s.conn = c
	}
	return s.conn.QueryRow(context.Background(), sql).Scan(dest...)
}

// insertTorture commits rows "torture" messages (seq from, from+1...) in
// one transaction.
func (s *restartSetup) insertTorture(t *testing.T, from, rows int) {
	pgtest.Exec(t, s.url, fmt.Sprintf(`INSERT INTO %s (id, type, key, payload)
		SELECT gen_random_uuid(), 'torture', 'k' || (g %% 10), jsonb_build_object('key', 'k' || (g %% 10), 'seq', g)
		FROM generate_series(%d, %d) g`, s.ob.Table, from, from+rows-1))
}

// TestIntegrationFastShutdownWithSentAtLetsPostgresStop: with
// columns.sent_at mapped, pg_ctl stop -m fast while the relay streams a
// transaction of 20,000 rows. Fast shutdown terminates the marker's
// connection and refuses new ones, and the WAL sender waits, before it
// exits, for the relay to confirm all it sent: the relay ends the cycle
// (the server stops well within pg_ctl's 60 s; it used to wait for
// ever), starts a new one once the server is back, and every row is
// delivered and marked sent, the relay never exiting.
func TestIntegrationFastShutdownWithSentAtLetsPostgresStop(t *testing.T) {
	t.Parallel()
	s := newRestartSetup(t, true, "")
	cdcInit(t, s.cfg)
	p := startCDC(t, "run", "--config", s.cfg)
	s.insertTorture(t, 1, 20_000)
	lines := relaytest.NewLineCounter(s.out)
	if !pgtest.WaitFor(60*time.Second, func() bool { return lines.Count() >= 1000 }) {
		t.Fatalf("%d messages shown after 60 s, want 1,000\n%s", lines.Count(), p.Stderr.String())
	}
	start := time.Now()
	if err := s.cluster.Stop("fast"); err != nil {
		t.Fatalf("pg_ctl stop -m fast while the relay streams (after %s): %v\n%s", time.Since(start).Round(time.Millisecond), err, p.Stderr.String())
	}
	t.Logf("pg_ctl stop -m fast took %s with %d messages shown", time.Since(start).Round(time.Millisecond), lines.Count())
	if err := s.cluster.Start(); err != nil {
		t.Fatal(err)
	}
	s.insertTorture(t, 20_001, 100)
	var committed map[string]relaytest.Seq
	if !pgtest.WaitFor(30*time.Second, func() bool {
		if s.query(t, "SELECT 1", new(int)) != nil {
			return false
		}
		committed = tortureCommitted(t, s.conn, s.ob.Table)
		return relaytest.AllDelivered(committed, relaytest.ReadLines(t, s.out))
	}) {
		t.Fatalf("not every message delivered 30 s after the server was back (exited: %v)\n%s", p.Exited(), p.Stderr.String())
	}
	relaytest.CheckDelivered(t, "out", committed, relaytest.ReadLines(t, s.out))
	var unmarked int
	if !pgtest.WaitFor(30*time.Second, func() bool {
		return s.query(t, "SELECT count(*) FROM "+s.ob.Table+" WHERE sent_at IS NULL", &unmarked) == nil && unmarked == 0
	}) {
		t.Errorf("%d of the %d delivered rows have sent_at NULL after 30 s", unmarked, len(committed))
	}
	if p.Exited() {
		t.Fatalf("the relay exited\n%s", p.Stderr.String())
	}
}

// TestIntegrationPostgresRestartWhileParkingRelayGoesOn: a relay with
// relay.on_invalid dead_letter or hold_key parks a row with an empty type;
// PostgreSQL is restarted (-m immediate), which closes the dead-letter
// store's connection; the next bad row's park finds it closed. The relay
// starts a new cycle (it used to exit 1: "dead-letter: ...: conn closed")
// and parks it; every good row is delivered.
func TestIntegrationPostgresRestartWhileParkingRelayGoesOn(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"dead_letter", "hold_key"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			s := newRestartSetup(t, false, "relay: {on_invalid: "+policy+"}")
			dlq := relaytest.WithDeadLetterTable(t, s.url, s.cfg)
			cdcInit(t, s.cfg)
			p := startCDC(t, "run", "--config", s.cfg)
			bad := func(key string) {
				pgtest.Exec(t, s.url, "INSERT INTO "+s.ob.Table+" (id, type, key, payload) VALUES (gen_random_uuid(), '', '"+key+"', '{}')")
			}
			parked := func(n int) bool {
				var got int
				return s.query(t, "SELECT count(*) FROM "+dlq, &got) == nil && got >= n
			}
			bad("b1")
			s.insertTorture(t, 1, 10)
			if !pgtest.WaitFor(30*time.Second, func() bool { return parked(1) && relaytest.CountLines(s.out) >= 10 }) {
				t.Fatalf("the first bad row not parked or the rows not delivered after 30 s\n%s", p.Stderr.String())
			}
			if err := s.cluster.Restart("immediate"); err != nil {
				t.Fatal(err)
			}
			bad("b2")
			s.insertTorture(t, 11, 10)
			var committed map[string]relaytest.Seq
			if !pgtest.WaitFor(30*time.Second, func() bool {
				if p.Exited() || !parked(2) {
					return false
				}
				committed = tortureCommitted(t, s.conn, s.ob.Table)
				return relaytest.AllDelivered(committed, relaytest.ReadLines(t, s.out))
			}) {
				t.Fatalf("after the restart: the second bad row not parked or a row not delivered within 30 s (exited: %v)\n%s", p.Exited(), p.Stderr.String())
			}
			relaytest.CheckDelivered(t, "out", committed, relaytest.ReadLines(t, s.out))
		})
	}
}

// TestIntegrationPostgresRestartWhileRelayStartsRelayGoesOn: PostgreSQL
// restarted (-m immediate) twice while the relay starts (checks, slot,
// state): it starts a new cycle each time, never exits, and delivers
// every row.
func TestIntegrationPostgresRestartWhileRelayStartsRelayGoesOn(t *testing.T) {
	t.Parallel()
	s := newRestartSetup(t, true, "relay: {on_invalid: dead_letter}")
	relaytest.WithDeadLetterTable(t, s.url, s.cfg)
	cdcInit(t, s.cfg)
	s.insertTorture(t, 1, 100)
	p := startCDC(t, "run", "--config", s.cfg)
	for i, after := range []time.Duration{50 * time.Millisecond, 300 * time.Millisecond} {
		time.Sleep(after)
		if err := s.cluster.Restart("immediate"); err != nil {
			t.Fatal(err)
		}
		if p.Exited() {
			t.Fatalf("the relay exited after restart %d\n%s", i+1, p.Stderr.String())
		}
	}
	s.insertTorture(t, 101, 100)
	var committed map[string]relaytest.Seq
	if !pgtest.WaitFor(30*time.Second, func() bool {
		if p.Exited() || s.query(t, "SELECT 1", new(int)) != nil {
			return false
		}
		committed = tortureCommitted(t, s.conn, s.ob.Table)
		return relaytest.AllDelivered(committed, relaytest.ReadLines(t, s.out))
	}) {
		t.Fatalf("not every message delivered 30 s after the restarts (exited: %v)\n%s", p.Exited(), p.Stderr.String())
	}
	relaytest.CheckDelivered(t, "out", committed, relaytest.ReadLines(t, s.out))
}
