package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// statusJSONOf runs cdc status --json and decodes its stdout, which must be
// one JSON object and nothing else.
func statusJSONOf(t *testing.T, cfg string) (code int, st map[string]any, stderr string) {
	t.Helper()
	code, stdout, stderr := cdc(t, nil, "status", "--json", cfg)
	dec := json.NewDecoder(strings.NewReader(stdout))
	if err := dec.Decode(&st); err != nil || dec.More() {
		t.Fatalf("cdc status --json: exit %d, not one JSON object (%v):\n%s\nstderr: %s", code, err, stdout, stderr)
	}
	return code, st, stderr
}

// plainError checks that stderr is one plain-text line "cdc <cmd>: …"
// holding want, not a JSON log line.
func plainError(t *testing.T, cmd, stderr, want string) {
	t.Helper()
	if !strings.HasPrefix(stderr, "cdc "+cmd+": ") || strings.Count(stderr, "\n") != 1 || strings.Contains(stderr, `"level"`) || !strings.Contains(stderr, want) {
		t.Errorf("cdc %s: want one plain line with %q on stderr, got:\n%s", cmd, want, stderr)
	}
}

// TestIntegrationStatusJSONCarriesEveryField: cdc status --json prints one
// JSON object with the slot's fields (null while the slot is missing, exit
// 1 then too), each configured sink with its acknowledged commit LSN or
// null, the parked messages and no warnings; the text form gives sizes in
// binary units, and the JSON exact bytes.
func TestIntegrationStatusJSONCarriesEveryField(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	cfg := ob.Config(t, "  - {name: out, kind: stdout}\n  - {name: audit, kind: discard}", "")
	dlq := relaytest.WithDeadLetterTable(t, url, cfg)

	code, st, stderr := statusJSONOf(t, cfg)
	if code != 1 || st["exists"] != false || st["slot"] != ob.Slot || st["plugin"] != nil || st["lag_bytes"] != nil {
		t.Errorf("before init: exit %d, %v", code, st)
	}
	plainError(t, "status", stderr, "is missing: run cdc init")

	cdcInit(t, cfg)
	pgtest.Exec(t, url,
		fmt.Sprintf("INSERT INTO public.walpost_sink_progress (slot, sink, commit_lsn, lsn) VALUES ('%s', 'out', '0/10', '0/10')", ob.Slot),
		fmt.Sprintf("INSERT INTO %s (slot, lsn, sink, commit_lsn, error, row_data) VALUES ('%[2]s', '0/1', '', '0/1', 'e', '{}'), ('%[2]s', '0/2', 'audit', '0/2', 'e', '{}')", dlq, ob.Slot),
		// About 2 MB of WAL the slot holds back (no relay runs).
		fmt.Sprintf("INSERT INTO %s (id, type, payload) SELECT gen_random_uuid(), 't', jsonb_build_object('pad', repeat('x', 1000)) FROM generate_series(1, 2000)", ob.Table))
	t.Cleanup(func() {
		pgtest.Exec(t, url, fmt.Sprintf("DELETE FROM public.walpost_sink_progress WHERE slot = '%s'", ob.Slot))
	})

	code, st, stderr = statusJSONOf(t, cfg)
	if code != 0 || stderr != "" {
		t.Fatalf("status --json: exit %d, stderr %s", code, stderr)
	}
	for _, k := range []string{"slot", "exists", "plugin", "database", "active", "active_pid", "confirmed_lsn", "current_wal",
		"lag_bytes", "retained_bytes", "sinks", "slowest_sink", "dead_letters", "warnings"} {
		if _, ok := st[k]; !ok {
			t.Errorf("no %q in %v", k, st)
		}
	}
	if st["exists"] != true || st["plugin"] != "pgoutput" || st["database"] != "postgres" || st["active"] != false || st["active_pid"] != nil {
		t.Errorf("slot fields: %v", st)
	}
	lag, _ := st["lag_bytes"].(float64)
	if lag < 1_000_000 || lag != float64(int64(lag)) {
		t.Errorf("lag_bytes %v: want the exact bytes of ~2 MB of WAL", st["lag_bytes"])
	}
	if b, _ := json.Marshal(st["sinks"]); string(b) != `[{"acknowledged_commit_lsn":"0/10","acknowledged_commit_time":null,"failing":false,"failing_since":null,"last_error":null,"last_error_at":null,"name":"out"},`+
		`{"acknowledged_commit_lsn":null,"acknowledged_commit_time":null,"failing":false,"failing_since":null,"last_error":null,"last_error_at":null,"name":"audit"}]` {
		t.Errorf("sinks: %s", b)
	}
	if b, _ := json.Marshal(st["dead_letters"]); string(b) != fmt.Sprintf(`{"held":0,"refused":{"audit":1},"table":"%s","total":2,"unmappable":1}`, dlq) {
		t.Errorf("dead_letters: %s", b)
	}
	if b, _ := json.Marshal(st["warnings"]); string(b) != "[]" {
		t.Errorf("warnings: %s", b)
	}

	code, stdout, _ := cdc(t, nil, "status", cfg)
	if code != 0 || !regexp.MustCompile(`\nlag: +\d+\.\d MiB \(`).MatchString(stdout) || !regexp.MustCompile(`\nretained WAL: +\d+\.\d MiB \(`).MatchString(stdout) {
		t.Errorf("text status: exit %d, want the lag and retained WAL in MiB:\n%s", code, stdout)
	}
}

// TestIntegrationStatusWarnsAboutASlotRunRefuses: a slot of another plugin
// than pgoutput, of another database than postgres.url's, or without
// failover while postgres.failover_slot is true (or a server without
// failover slots), draws a warning with cdc run's own refusal and how to
// fix it, in text and JSON, and exit 1.
func TestIntegrationStatusWarnsAboutASlotRunRefuses(t *testing.T) {
	t.Parallel()
	base := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, base)
	pgtest.Exec(t, base, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'test_decoding')", ob.Slot))
	plugin := ob.Config(t, "  - {name: out, kind: stdout}", "")

	// A pgoutput slot in another database, named in a config for this one.
	db := pgtest.Name(t, "otherdb")
	pgtest.Exec(t, base, "CREATE DATABASE "+db)
	t.Cleanup(func() { pgtest.Exec(t, base, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)") })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	slot := pgtest.Name(t, "slot")
	pgtest.Exec(t, u.String(), fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", slot))
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), u.String())
		if err == nil {
			conn.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", slot)
			conn.Close(context.Background())
		}
	})
	other := ob
	other.Slot = slot
	database := other.Config(t, "  - {name: out, kind: stdout}", "")

	// A slot made without failover, with postgres.failover_slot: true.
	fo := relaytest.NewOutbox(t, base)
	failover := fo.Config(t, "  - {name: out, kind: stdout}", "")
	cdcInit(t, failover)
	addPostgres(t, failover, "failover_slot: true")
	var version int
	if err := pgtest.Connect(t, base).QueryRow(context.Background(), "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		t.Fatal(err)
	}
	failoverWant, failoverFix := "failover slots need PostgreSQL 17 or later: postgres.failover_slot is true", "set postgres.failover_slot: false"
	if version >= 170000 {
		failoverWant, failoverFix = fmt.Sprintf("slot %q was created without failover", fo.Slot), "ALTER_REPLICATION_SLOT "+fo.Slot+" (FAILOVER true)"
	}

	for _, c := range []struct{ name, cfg, want, fix string }{
		{"plugin", plugin, fmt.Sprintf("slot %q exists with plugin \"test_decoding\"; walpost needs pgoutput", ob.Slot), "pg_drop_replication_slot('" + ob.Slot + "')"},
		{"database", database, fmt.Sprintf("slot %q belongs to database %q, not \"postgres\"", slot, db), "set postgres.slot to another name"},
		{"failover", failover, failoverWant, failoverFix},
	} {
		code, stdout, stderr := cdc(t, nil, "status", c.cfg)
		if code != 1 || !strings.Contains(stdout, "\nwarning:       ") || !strings.Contains(stdout, c.want) || !strings.Contains(stdout, c.fix) {
			t.Errorf("%s: exit %d, want 1 and a warning with %q and %q:\n%s", c.name, code, c.want, c.fix, stdout)
		}
		plainError(t, "status", stderr, "cannot be used by cdc run")
		code, st, _ := statusJSONOf(t, c.cfg)
		w, _ := st["warnings"].([]any)
		if code != 1 || len(w) != 1 || !strings.Contains(fmt.Sprint(w[0]), c.want) {
			t.Errorf("%s: --json exit %d, warnings %v", c.name, code, st["warnings"])
		}
	}
}

// TestStatusErrorsArePlainText: the interactive commands report a server
// they cannot reach as one plain line on stderr (not a JSON log line),
// exit 1, and print nothing on stdout, --json included.
func TestStatusErrorsArePlainText(t *testing.T) {
	t.Parallel()
	port, err := pgtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg := t.TempDir() + "/cdc.yaml"
	writeFile(t, cfg, fmt.Sprintf("postgres: {url: 'postgres://u@127.0.0.1:%d/app?sslmode=disable&connect_timeout=2'}\nsinks: [{name: out, kind: discard}]\nlog: {format: json}\n", port))
	for _, args := range [][]string{{"status", cfg}, {"status", "--json", cfg}, {"init", "--wait", "0", cfg}, {"skip", cfg, "--lsn", "0/1"}} {
		code, stdout, stderr := cdc(t, nil, args...)
		if code != 1 || stdout != "" {
			t.Errorf("cdc %s: exit %d, stdout %q", strings.Join(args, " "), code, stdout)
		}
		plainError(t, args[0], stderr, fmt.Sprintf("port=%d", port))
	}
}
