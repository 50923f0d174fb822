package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/internal/tcpproxy"
)

const initRetryLine = "cannot connect to postgres; retrying (cdc init --wait)"

// TestIntegrationInitWaitsForAServerThatIsNotListeningYet: `cdc init`
// started while nothing listens on the server's port (a first `docker
// compose up`: Postgres still in initdb) retries with a warning per
// attempt, and creates everything once the server listens: start order
// does not matter. With a short --wait it gives up, exit 1, saying so.
func TestIntegrationInitWaitsForAServerThatIsNotListeningYet(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	pgAddr := serverAddr(url)
	proxy, err := tcpproxy.New(pgAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	proxy.Cut() // connections to proxy.Addr() are refused until Restore
	ob.URL = strings.Replace(url, pgAddr, proxy.Addr(), 1)
	cfg := ob.Config(t, "  - {name: out, kind: discard}", "")

	// Gives up after --wait.
	start := time.Now()
	code, stdout, stderr := cdc(t, nil, "init", "--config", cfg, "--wait", "2s")
	if elapsed := time.Since(start); code != 1 || elapsed < 2*time.Second || elapsed > 20*time.Second ||
		!strings.Contains(stderr, "gave up after --wait 2s") || !strings.Contains(stderr, initRetryLine) {
		t.Fatalf("cdc init --wait 2s with nothing listening: exit %d after %v, want 1 after about 2 s, retrying, then saying it gave up:\n%s%s", code, elapsed, stdout, stderr)
	}
	// Each retry's log record gives its waits in whole milliseconds, in
	// fields named with the unit (the console format here).
	unit := regexp.MustCompile(` retry_in_ms=[1-9][0-9]* wait_left_ms=[0-9]+(\s|$)`)
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, initRetryLine) && !unit.MatchString(line) {
			t.Errorf("retry record %s: want retry_in_ms and wait_left_ms, whole numbers of milliseconds", line)
		}
	}

	// Waits (default --wait) until the server listens.
	p := startCDC(t, "init", "--config", cfg)
	pgtest.Await(t, 30*time.Second, "cdc init retrying", func() bool { return strings.Count(p.Stderr.String(), initRetryLine) >= 3 })
	if p.Exited() {
		t.Fatalf("cdc init gave up while the server was not listening:\n%s", p.Stderr.String())
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait(60 * time.Second); code != 0 || !strings.Contains(p.Stdout.String(), "slot "+ob.Slot+": created") {
		t.Fatalf("cdc init once the server listens: exit %d, want 0 and the slot created:\n%s%s", code, p.Stdout.String(), p.Stderr.String())
	}
	var slots int
	if err := pgtest.Connect(t, url).QueryRow(context.Background(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", ob.Slot).Scan(&slots); err != nil || slots != 1 {
		t.Fatalf("slot %s after cdc init: %d (%v)", ob.Slot, slots, err)
	}
}

// TestIntegrationInitDoesNotRetryARefusal: a wrong password (28P01) and a
// database that does not exist (3D000) are the server's answer, not a
// server that is not there yet: cdc init fails at once (well within
// --wait), exit 1, saying what to fix, without retrying or printing the
// password.
func TestIntegrationInitDoesNotRetryARefusal(t *testing.T) {
	const right, wrong = "right-Pw-4471", "wrong-Pw-0932"
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	pwRole := pgtest.Name(t, "pw")
	pgtest.Exec(t, url, "CREATE ROLE "+pwRole+" SUPERUSER LOGIN PASSWORD '"+right+"'")
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP ROLE IF EXISTS "+pwRole) })
	withHBA(t, url, "host all "+pwRole+" 127.0.0.1/32 scram-sha-256")
	u := serverAddr(url)
	for _, c := range []struct{ name, url, sqlstate string }{
		{"wrong password", fmt.Sprintf("postgres://%s:%s@%s/postgres", pwRole, wrong, u), "28P01"},
		{"no such database", fmt.Sprintf("postgres://postgres@%s/%s", u, pgtest.Name(t, "nodb")), "3D000"},
	} {
		o := ob
		o.URL = c.url
		start := time.Now()
		code, stdout, stderr := cdc(t, nil, "init", "--config", o.Config(t, "  - {name: out, kind: discard}", ""), "--wait", "60s")
		if code != 1 || time.Since(start) > 15*time.Second || !strings.Contains(stderr, c.sqlstate) ||
			!strings.Contains(stderr, "fix the user, password or database of postgres.url") {
			t.Errorf("%s: exit %d after %v, want 1 at once with SQLSTATE %s and what to fix:\n%s%s", c.name, code, time.Since(start), c.sqlstate, stdout, stderr)
		}
		if strings.Contains(stderr, initRetryLine) || strings.Contains(stderr+stdout, wrong) {
			t.Errorf("%s: cdc init retried, or printed the password:\n%s", c.name, stderr)
		}
	}
}
