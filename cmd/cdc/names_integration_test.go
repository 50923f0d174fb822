package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// yamlQuote writes s as a double-quoted YAML scalar.
func yamlQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// canaryMu serialises the canary's CREATE TABLE IF NOT EXISTS: two at
// once race on the catalog (unique_violation on pg_type).
var canaryMu sync.Mutex

// hostileOutbox creates, in a schema of its own, an outbox whose schema,
// table, columns, publication and state tables have names full of quotes,
// semicolons, spaces, dots and capitals, with a sent-at column, plus a
// canary table an injection would drop. It returns the config's path.
func hostileOutbox(t *testing.T, url, out string) (cfg, schema, table string) {
	t.Helper()
	n := pgtest.Name(t, "")
	n = n[len(n)-8:]
	schema = `Sch "` + n + `"; DROP TABLE canary; --`
	table = `Out.box'); DROP TABLE canary; --`
	q := func(parts ...string) string { return pgx.Identifier(parts).Sanitize() }
	canaryMu.Lock()
	pgtest.Exec(t, url, "CREATE TABLE IF NOT EXISTS canary (x int)")
	canaryMu.Unlock()
	pgtest.Exec(t, url,
		"CREATE SCHEMA "+q(schema),
		fmt.Sprintf(`CREATE TABLE %s (%s uuid PRIMARY KEY, %s text NOT NULL, %s text NOT NULL, %s timestamptz NOT NULL DEFAULT now(), %s timestamptz)`,
			q(schema, table), q(`I"d`), q("Ty pe"), q("Pay;load"), q("Created.On"), q(`Sent "At"`)))
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP SCHEMA IF EXISTS "+q(schema)+" CASCADE") })
	display := func(parts ...string) string {
		ps := make([]string, len(parts))
		for i, p := range parts {
			ps[i] = `"` + strings.ReplaceAll(p, `"`, `""`) + `"`
		}
		return strings.Join(ps, ".")
	}
	slot := "s" + strings.ToLower(n)
	y := fmt.Sprintf(`postgres:
  url: %s
  table: %s
  publication: %s
  slot: %s
  progress_table: %s
  dead_letter_table: %s
  status_interval: 1s
columns: {id: %s, type: %s, key: "-", payload: %s, headers: "-", time: %s, sent_at: %s}
sinks:
  - {name: out, kind: file, path: %s}
`, url, yamlQuote(display(schema, table)), yamlQuote(`Pub "`+n+`"; --`), slot,
		yamlQuote(display(schema, "Progress; --")), yamlQuote(display(schema, `Dead "Letters"`)),
		yamlQuote(`I"d`), yamlQuote("Ty pe"), yamlQuote("Pay;load"), yamlQuote("Created.On"), yamlQuote(`Sent "At"`), out)
	cfg = filepath.Join(t.TempDir(), "cdc.yaml")
	writeFile(t, cfg, y)
	t.Cleanup(func() {
		pgtest.WaitFor(10*time.Second, func() bool {
			conn, err := pgx.Connect(context.Background(), url)
			if err != nil {
				return false
			}
			defer conn.Close(context.Background())
			_, err = conn.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
			return err == nil
		})
		pgtest.Exec(t, url, "DROP PUBLICATION IF EXISTS "+q(`Pub "`+n+`"; --`))
	})
	return cfg, schema, table
}

// TestIntegrationAnyNameWorksAsANameAndDoesNothingElse: cdc init and cdc
// run relay an outbox whose every name holds quotes, semicolons, spaces
// and dots (and would drop a table if spliced into SQL unquoted): the
// messages arrive, sent-at is set, and the canary table survives.
func TestIntegrationAnyNameWorksAsANameAndDoesNothingElse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg, schema, table := hostileOutbox(t, url, out)
	cdcInit(t, cfg)
	p := startCDC(t, "run", "--config", cfg)
	conn := pgtest.Connect(t, url)
	qt := pgx.Identifier{schema, table}.Sanitize()
	var ids []string
	for i := range 3 {
		id := uuid.NewString()
		ids = append(ids, id)
		if _, err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s ("I""d", "Ty pe", "Pay;load") VALUES ($1, 't', $2)`, qt), id, fmt.Sprintf(`{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	pgtest.Await(t, 30*time.Second, "3 lines in the file sink", func() bool { return relaytest.CountLines(out) == 3 })
	for i, l := range relaytest.ReadLines(t, out) {
		if l.ID != ids[i] {
			t.Fatalf("line %d: id %s, want %s", i, l.ID, ids[i])
		}
	}
	pgtest.Await(t, 10*time.Second, "every row marked sent", func() bool {
		var n int
		conn.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE "Sent ""At""" IS NULL`, qt)).Scan(&n)
		return n == 0
	})
	p.Stop(t)
	var canary bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('canary') IS NOT NULL").Scan(&canary); err != nil || !canary {
		t.Fatalf("the canary table is gone (%v): a name was spliced into SQL", err)
	}
}

// TestIntegrationSlotWaitsForSentAtMarks: while the UPDATE that sets
// sent-at fails (a trigger refuses it), rows are delivered but the slot
// is not confirmed past them; once it works, they are marked and the
// slot moves on. A row whose sent-at is set was delivered; a row
// delivered but not marked is marked after a restart (the sink's progress
// table spares the file sink a second copy).
func TestIntegrationSlotWaitsForSentAtMarks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg, schema, table := hostileOutbox(t, url, out)
	cdcInit(t, cfg)
	qt := pgx.Identifier{schema, table}.Sanitize()
	fn := pgx.Identifier{schema, "refuse"}.Sanitize()
	pgtest.Exec(t, url,
		"CREATE TABLE IF NOT EXISTS sentat_gate (open bool)", "DELETE FROM sentat_gate", "INSERT INTO sentat_gate VALUES (false)",
		fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT (SELECT open FROM sentat_gate) THEN RAISE EXCEPTION 'sent-at refused by the test'; END IF;
  RETURN NEW;
END $$`, fn),
		fmt.Sprintf("CREATE TRIGGER refuse BEFORE UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION %s()", qt, fn))
	slot := slotOf(t, cfg)
	conn := pgtest.Connect(t, url)
	before := relaytest.SlotConfirmed(t, conn, slot)
	p := startCDC(t, "run", "--config", cfg)
	id := uuid.NewString()
	if _, err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s ("I""d", "Ty pe", "Pay;load") VALUES ($1, 't', '{}')`, qt), id); err != nil {
		t.Fatal(err)
	}
	pgtest.Await(t, 30*time.Second, "the row in the file sink", func() bool { return relaytest.CountLines(out) == 1 })
	pgtest.Await(t, 20*time.Second, "the marking to fail", func() bool { return strings.Contains(p.Stderr.String(), "sent-at refused by the test") })
	// Delivered, not marked: the slot must stay before the row's commit.
	time.Sleep(2 * time.Second) // status_interval is 1s: the relay had time to confirm if it would
	if c := relaytest.SlotConfirmed(t, conn, slot); c != before {
		t.Fatalf("slot moved from %s to %s with the row delivered but not marked sent", before, c)
	}
	p.Kill9(t)
	// Restarted, the row is streamed again, and once marking works it is
	// marked and the slot moves past it.
	pgtest.Exec(t, url, "UPDATE sentat_gate SET open = true")
	p = startCDC(t, "run", "--config", cfg)
	pgtest.Await(t, 20*time.Second, "the row marked and the slot past it", func() bool {
		var marked bool
		conn.QueryRow(ctx, fmt.Sprintf(`SELECT "Sent ""At""" IS NOT NULL FROM %s WHERE "I""d" = $1`, qt), id).Scan(&marked)
		return marked && relaytest.SlotConfirmed(t, conn, slot) > before
	})
	p.Stop(t)
	if n := relaytest.CountLines(out); n != 1 {
		t.Fatalf("%d lines in the file sink, want 1 (its progress table covers the row)", n)
	}
}

// slotOf reads postgres.slot from a config file.
func slotOf(t *testing.T, cfg string) string {
	t.Helper()
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "slot: "); ok {
			return v
		}
	}
	t.Fatal("no slot in " + cfg)
	return ""
}
