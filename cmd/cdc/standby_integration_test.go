package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationHotStandbyOnOneConfigLosesNothingOnKill9: two `cdc run`
// on ONE config (the README's hot standby), traffic throughout, kill -9 of
// the active one. The standby opens nothing before it holds the slot (the
// file sink used to be opened and its offset remembered by the standby at
// start, so that after the takeover it overwrote what the first instance
// wrote meanwhile), then takes over: every committed id is delivered, no
// line is torn or overwritten. The time from the kill to the standby's
// first delivery is measured (under 10 s with default settings). Run for
// every sink kind that writes locally: file and stdout (each process's
// own stdout).
func TestIntegrationHotStandbyOnOneConfigLosesNothingOnKill9(t *testing.T) {
	for _, kind := range []string{"file", "stdout"} {
		t.Run(kind, func(t *testing.T) { testHotStandby(t, kind) })
	}
}

func testHotStandby(t *testing.T, kind string) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	sink := fmt.Sprintf("  - {name: out, kind: file, path: %s}", out)
	if kind == "stdout" {
		sink = "  - {name: out, kind: stdout}"
	}
	cfg := ob.Config(t, sink, "relay: {batch_size: 50}")
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)

	prod := ob.StartProducer(t, 8, 2*time.Millisecond)
	active := startCDC(t, "run", "--config", cfg)
	delivered := func(p ...*proc) []relaytest.Line {
		if kind == "file" {
			// Whole lines only: the active relay may be mid-write (a
			// reader can see part of one write(2) to a file).
			b, _ := os.ReadFile(out)
			return relaytest.ParseLines(t, string(b[:bytes.LastIndexByte(b, '\n')+1]))
		}
		var lines []relaytest.Line
		for _, q := range p {
			// Whole lines only: a running process may be mid-write (a
			// batch is one write, which a pipe may pass on in pieces),
			// and a killed one may have been. A torn line is not a
			// delivery: it was not acknowledged, the standby sends it.
			s := q.Stdout.String()
			lines = append(lines, relaytest.ParseLines(t, s[:strings.LastIndexByte(s, '\n')+1])...)
		}
		return lines
	}
	if !pgtest.WaitFor(30*time.Second, func() bool { return len(delivered(active)) > 100 }) {
		t.Fatalf("the first instance did not deliver\n%s", active.Stderr.String())
	}
	standby := startCDC(t, "run", "--config", cfg)
	if !pgtest.WaitFor(30*time.Second, func() bool { return strings.Contains(standby.Stderr.String(), "held by another process") }) {
		t.Fatalf("the standby did not wait for the slot\n%s", standby.Stderr.String())
	}
	// Traffic flows through the active instance while the standby waits.
	before := len(delivered(active))
	if !pgtest.WaitFor(30*time.Second, func() bool { return len(delivered(active)) > before+500 }) {
		t.Fatal("no traffic through the active instance")
	}
	if strings.Contains(standby.Stderr.String(), "sink open") || standby.Stdout.String() != "" {
		t.Fatalf("the standby opened or wrote its sink before it held the slot:\n%s", standby.Stderr.String())
	}
	atKill := len(delivered(active))
	active.Kill9(t)
	killed := time.Now()
	var takeover time.Duration
	if !pgtest.WaitFor(30*time.Second, func() bool {
		if kind == "file" {
			return len(delivered()) > atKill
		}
		return len(delivered(standby)) > 0
	}) {
		t.Fatalf("the standby did not deliver within 30 s of the kill\n%s", standby.Stderr.String())
	}
	takeover = time.Since(killed)
	time.Sleep(500 * time.Millisecond) // traffic through the new active instance
	prod.Stop()
	committed := prod.Committed(t, conn)
	var r relaytest.DeliveryReport
	if !pgtest.WaitFor(60*time.Second, func() bool { return relaytest.AllDelivered(committed, delivered(active, standby)) }) {
		t.Logf("standby:\n%s", standby.Stderr.String())
	}
	r = relaytest.CheckDelivered(t, kind, committed, delivered(active, standby))
	t.Logf("%s sink: kill -9 of the active instance → first delivery by the standby: %v; %d committed, %d duplicates",
		kind, takeover.Round(time.Millisecond), r.Committed, r.Duplicates)
	if takeover > 10*time.Second {
		t.Errorf("takeover took %v, want under 10 s", takeover)
	}
}

// TestIntegrationSlotTakenWhileReconnectingClosesTheSinksAndWaits: the
// active relay's WAL sender is terminated and another process takes the
// slot before the relay reconnects (as a standby would after a network
// cut). The relay must not go on writing with its sinks open: it closes
// them and waits for the slot as a standby, then takes it back, reopens
// its sinks and delivers what was committed meanwhile.
func TestIntegrationSlotTakenWhileReconnectingClosesTheSinksAndWaits(t *testing.T) {
	t.Parallel()
	url, ob, out, cfg := fileOutbox(t, "")
	conn := pgtest.Connect(t, url)
	ctx := context.Background()
	p := startCDC(t, "run", "--config", cfg)
	first := relaytest.NewMsg("t", "k", 1)
	ob.InsertTx(t, conn, first)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{first}, 30*time.Second, p.Stderr.String)

	var holder *pgconn.PgConn
	for attempt := 0; holder == nil; attempt++ {
		if attempt == 20 {
			t.Fatal("could not take the slot from the relay in 20 attempts")
		}
		conn.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1", ob.Slot)
		// Take the slot before the relay's reconnect (125-250 ms later).
		deadline := time.Now().Add(100 * time.Millisecond)
		for holder == nil && time.Now().Before(deadline) {
			holder, _ = holdSlot(t, url, ob)
		}
	}
	if !pgtest.WaitFor(20*time.Second, func() bool { return strings.Contains(p.Stderr.String(), "sinks closed; waiting for the slot again") }) {
		holder.Close(ctx)
		t.Fatalf("the relay did not close its sinks when it lost the slot:\n%s", p.Stderr.String())
	}
	second := relaytest.NewMsg("t", "k", 2)
	ob.InsertTx(t, conn, second)
	time.Sleep(500 * time.Millisecond)
	if n := relaytest.CountLines(out); n != 1 {
		t.Fatalf("the relay wrote %d lines while another process held the slot", n)
	}
	holder.Close(ctx)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{first, second}, 30*time.Second, p.Stderr.String)
	if n := strings.Count(p.Stderr.String(), "file sink open"); n != 2 {
		t.Fatalf("the file sink was opened %d times, want 2 (before and after the slot was lost)", n)
	}
}

// fileOutbox makes a test's outbox and a config with one file sink (and
// extra top-level YAML), runs cdc init, and returns the database URL, the
// outbox, the sink's path and the config's path.
func fileOutbox(t *testing.T, extra string) (url string, ob relaytest.Outbox, out, cfg string) {
	t.Helper()
	url = pgtest.URL(t)
	ob = relaytest.NewOutbox(t, url)
	out = filepath.Join(t.TempDir(), "out.jsonl")
	cfg = ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), extra)
	cdcInit(t, cfg)
	return url, ob, out, cfg
}

// holdSlot starts replication on ob's slot from a connection of the
// test's own, as another relay would; the caller closes it. It fails when
// the slot is held already.
func holdSlot(t *testing.T, url string, ob relaytest.Outbox) (*pgconn.PgConn, error) {
	t.Helper()
	ctx := context.Background()
	c, err := pgconn.Connect(ctx, url+"&replication=database")
	if err != nil {
		t.Fatal(err)
	}
	err = pglogrepl.StartReplication(ctx, c, ob.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + ob.Publication + "'"}})
	if err != nil {
		c.Close(ctx)
		return nil, err
	}
	return c, nil
}

// serverAddr returns the host:port of a postgres:// URL.
func serverAddr(url string) string {
	hostPart := strings.SplitN(strings.TrimPrefix(url, "postgres://"), "/", 2)[0]
	if i := strings.LastIndex(hostPart, "@"); i >= 0 {
		hostPart = hostPart[i+1:]
	}
	return hostPart
}
