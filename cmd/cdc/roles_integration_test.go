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

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationRunWorksWithTheGrantsOfSqlRolesSql: `cdc init` runs as
// the table's owner; `cdc run` runs as a role given exactly the grants of
// sql/roles.sql: it streams, parks a bad row, saves per-sink progress and
// writes heartbeats, creating nothing. Without one of the grants it stops
// at start naming the grant to give.
func TestIntegrationRunWorksWithTheGrantsOfSqlRolesSql(t *testing.T) {
	// Not parallel: a heartbeat is written only when the stream has been
	// idle for heartbeat_interval, which other relays' traffic prevents.
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	pgtest.Exec(t, url, "ALTER TABLE "+ob.Table+" ALTER COLUMN payload TYPE text")
	out := filepath.Join(t.TempDir(), "out.jsonl")
	progress := "public." + pgtest.Name(t, "prog")
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP TABLE IF EXISTS "+progress) })
	sink := fmt.Sprintf("  - {name: out, kind: file, path: %s}", out)
	extra := "relay: {on_invalid: dead_letter}"
	adminCfg := ob.Config(t, sink, extra)
	dlq := relaytest.WithDeadLetterTable(t, url, adminCfg)
	addPostgres(t, adminCfg, "progress_table: "+progress)
	cdcInit(t, adminCfg)

	role := pgtest.Name(t, "relay")
	sql, err := os.ReadFile("../../sql/roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	grants := strings.NewReplacer("walpost_relay", role, "public.outbox", ob.Table,
		"public.walpost_sink_progress", progress, "public.walpost_dead_letter", dlq).Replace(string(sql))
	pgtest.Exec(t, url, grants)
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP OWNED BY "+role+"; DROP ROLE "+role) })

	relayOB := ob
	relayOB.URL = strings.Replace(url, "postgres@", role+":change-me@", 1)
	cfg := relayOB.Config(t, sink, extra)
	addPostgres(t, cfg, "progress_table: "+progress, "dead_letter_table: "+dlq, "heartbeat_interval: 500ms")

	conn := pgtest.Connect(t, url)
	ctx := context.Background()
	p := startCDC(t, "run", "--config", cfg)
	good := relaytest.NewMsg("ok", "k", 1)
	ob.InsertTx(t, conn, good)
	bad := relaytest.NewMsg("bad", "k", 2)
	if _, err := conn.Exec(ctx, "INSERT INTO "+ob.Table+" (id, type, key, payload) VALUES ($1, 'bad', 'k', 'not json')", bad.ID); err != nil {
		t.Fatal(err)
	}
	after := relaytest.NewMsg("after", "k", 3)
	ob.InsertTx(t, conn, after)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{good, after}, 30*time.Second, p.Stderr.String)
	if !pgtest.WaitFor(10*time.Second, func() bool {
		var n int
		conn.QueryRow(ctx, "SELECT count(*) FROM "+dlq+" WHERE message_id = $1", bad.ID).Scan(&n)
		return n == 1
	}) {
		t.Fatalf("the bad row was not parked\n%s", p.Stderr.String())
	}
	if !pgtest.WaitFor(10*time.Second, func() bool {
		var n int
		conn.QueryRow(ctx, "SELECT count(*) FROM "+progress+" WHERE slot = $1 AND sink = 'out'", ob.Slot).Scan(&n)
		return n == 1
	}) {
		t.Fatalf("no progress saved\n%s", p.Stderr.String())
	}
	if !pgtest.WaitFor(10*time.Second, func() bool { return strings.Contains(p.Stderr.String(), "heartbeat written") }) {
		t.Fatalf("no heartbeat written by the relay role\n%s", p.Stderr.String())
	}
	var status bytes.Buffer
	if code := run([]string{"status", "--config", cfg}, &status, &status); code != 0 {
		t.Fatalf("cdc status as the relay role: exit %d\n%s", code, status.String())
	}
	p.Cmd.Process.Signal(os.Interrupt)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGINT\n%s", code, p.Stderr.String())
	}
	for _, bad := range []string{"ERROR", "permission denied", "failed"} {
		if strings.Contains(p.Stderr.String(), bad) {
			t.Fatalf("the relay role hit %q:\n%s", bad, p.Stderr.String())
		}
	}

	pgtest.Exec(t, url, "REVOKE INSERT ON "+progress+" FROM "+role)
	p = startCDC(t, "run", "--config", cfg)
	if code := p.Wait(30 * time.Second); code != 1 {
		t.Fatalf("without INSERT on the progress table: exit %d\n%s", code, p.Stderr.String())
	}
	want := "lacks INSERT on " + progress
	if !strings.Contains(p.Stderr.String(), want) || !strings.Contains(p.Stderr.String(), "GRANT SELECT, INSERT, UPDATE ON "+progress) {
		t.Fatalf("the error does not name the missing grant (%q):\n%s", want, p.Stderr.String())
	}
}

// addPostgres adds settings (key: value) under postgres: in the config file
// at path.
func addPostgres(t *testing.T, path string, settings ...string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, strings.Replace(string(b), "postgres:\n", "postgres:\n  "+strings.Join(settings, "\n  ")+"\n", 1))
}
