package main

import (
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

// TestIntegrationInitCreatesTheDefaultTableWithCreatedAtAsTime: on a
// database without the outbox table, cdc init with columns: {time:
// created_at} (as the README suggests) creates sql/outbox.sql's table,
// and cdc run then publishes a row with its created_at as its time.
func TestIntegrationInitCreatesTheDefaultTableWithCreatedAtAsTime(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	pgtest.Exec(t, url, "DROP TABLE "+ob.Table) // a fresh database: no table yet
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s, format: cloudevents}", out), "columns: {time: created_at}")
	code, stdout, stderr := cdc(t, nil, "init", "--config", cfg)
	if code != 0 || !strings.Contains(stdout, "table "+ob.Table+": created") {
		t.Fatalf("cdc init with columns: {time: created_at} and no table: exit %d, want 0 and the table created:\n%s%s", code, stdout, stderr)
	}
	p := startCDC(t, "run", "--config", cfg)
	conn := pgtest.Connect(t, url)
	m := relaytest.NewMsg("t", "k", 1)
	if _, err := conn.Exec(context.Background(), "INSERT INTO "+ob.Table+" (id, type, payload, created_at) VALUES ($1, 't', '{}', '2021-06-01 12:00:00+00')", m.ID); err != nil {
		t.Fatal(err)
	}
	pgtest.Await(t, 60*time.Second, "the row delivered", func() bool { return relaytest.CountLines(out) == 1 })
	if b, _ := os.ReadFile(out); !strings.Contains(string(b), `"time":"2021-06-01T12:00:00Z"`) {
		t.Errorf("the event's time is not the row's created_at:\n%s\n%s", b, p.Stderr.String())
	}
}

// TestIntegrationInitAdoptWithoutSentAtIsAConfigErrorAndDoesNothing:
// cdc init --adopt without columns.sent_at exits 2 naming the field,
// before it creates anything (no publication, no slot).
func TestIntegrationInitAdoptWithoutSentAtIsAConfigErrorAndDoesNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	cfg := ob.Config(t, "  - {name: out, kind: discard}", "")
	code, stdout, stderr := cdc(t, nil, "init", "--config", cfg, "--adopt")
	if code != 2 || !strings.Contains(stderr, "--adopt needs columns.sent_at") {
		t.Errorf("cdc init --adopt without columns.sent_at: exit %d, want 2 naming columns.sent_at:\n%s%s", code, stdout, stderr)
	}
	conn := pgtest.Connect(t, url)
	var pubs, slots int
	if err := conn.QueryRow(context.Background(), "SELECT (SELECT count(*) FROM pg_publication WHERE pubname = $1), (SELECT count(*) FROM pg_replication_slots WHERE slot_name = $2)",
		ob.Publication, ob.Slot).Scan(&pubs, &slots); err != nil {
		t.Fatal(err)
	}
	if pubs != 0 || slots != 0 || stdout != "" {
		t.Errorf("cdc init --adopt refused, yet created %d publication(s) and %d slot(s); it printed:\n%s", pubs, slots, stdout)
	}
}
