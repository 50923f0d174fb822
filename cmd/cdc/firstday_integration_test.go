package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/natsjs/natstest"
	"github.com/walpost/walpost/internal/publish/rabbitmq/rabbittest"
	"github.com/walpost/walpost/internal/relaytest"
)

// The tests of a newcomer's first day (issue 47): what the operator
// meets at start, in the config and in each command's errors.

// TestIntegrationBrokerLackingACapabilityStopsAtStart: with an idle
// outbox, a nats sink with columns.deliver_at on a server without message
// schedules (the machine's 2.9), and a rabbitmq sink with exchange_type:
// x-delayed-message on a server without the plugin, stop cdc run at
// start (exit 1, naming what is missing) before it logs "streaming",
// instead of streaming until the first message (docs/design.md,
// "Start-up checks").
func TestIntegrationBrokerLackingACapabilityStopsAtStart(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	t.Run("nats", func(t *testing.T) {
		t.Parallel()
		natsURL := natstest.Start(t)
		nc := natstest.Connect(t, natsURL)
		v := nc.ConnectedServerVersion()
		nc.Close()
		if !strings.HasPrefix(v, "2.9.") && !strings.HasPrefix(v, "2.10.") && !strings.HasPrefix(v, "2.11.") {
			t.Skipf("the machine's nats-server is %s, which has message schedules", v)
		}
		ob := scheduledOutbox(t, url)
		cfg := ob.Config(t, fmt.Sprintf("  - {name: n, kind: nats, servers: [%q], subject: 'idle.{type}', schedule_subject: idle.scheduled}", natsURL), scheduleColumns)
		cdcInit(t, cfg)
		p := startCDC(t, "run", "--config", cfg)
		code := p.Wait(30 * time.Second)
		log := p.Stderr.String()
		if code != 1 || !strings.Contains(log, "columns.deliver_at needs (nats-server 2.12.0 or later)") || strings.Contains(log, "streaming") {
			p.Cmd.Process.Kill()
			t.Fatalf("exit %d (-1: still running), want 1 at start, before streaming, saying nats-server %s is too old:\n%s", code, v, log)
		}
	})
	t.Run("rabbitmq", func(t *testing.T) {
		t.Parallel()
		rabbitURL := rabbittest.Start(t) // skips without RabbitMQ
		exchange := rabbittest.Name("walpost.test.idledelayed")
		t.Cleanup(func() { rabbittest.DeleteExchange(t, rabbitURL, exchange) })
		ob := scheduledOutbox(t, url)
		cfg := ob.Config(t, fmt.Sprintf("  - {name: r, kind: rabbitmq, url: %q, exchange: %q, exchange_type: x-delayed-message, declare_exchange: true, timeout: 5s}",
			rabbitURL, exchange), scheduleColumns)
		cdcInit(t, cfg)
		p := startCDC(t, "run", "--config", cfg)
		code := p.Wait(30 * time.Second)
		log := p.Stderr.String()
		if code != 1 || !strings.Contains(log, "rabbitmq_delayed_message_exchange") || strings.Contains(log, "streaming") {
			p.Cmd.Process.Kill()
			t.Fatalf("exit %d (-1: still running), want 1 at start, before streaming, saying the delayed-message plugin is missing:\n%s", code, log)
		}
	})
}

// TestIntegrationInitChecksEveryPrerequisiteBeforeTheFirstDDL: a slot name
// taken in another database, and wal_level=replica, stop cdc init before
// it creates the table or the publication (it used to create both, then
// fail); with --adopt the slot of another database is refused as plain
// init refuses it ("belongs to database …; set postgres.slot"), never
// with advice to drop what may be a live relay's slot.
func TestIntegrationInitChecksEveryPrerequisiteBeforeTheFirstDDL(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	nothingMade := func(t *testing.T, url string, ob relaytest.Outbox) {
		t.Helper()
		var tables int
		if err := pgtest.Connect(t, url).QueryRow(context.Background(), "SELECT count(*) FROM pg_class WHERE oid = to_regclass($1)", ob.Table).Scan(&tables); err != nil {
			t.Fatal(err)
		}
		if pubs := countPublications(t, url, ob.Publication); tables != 0 || pubs != 0 {
			t.Errorf("cdc init failed, yet created %d table(s) and %d publication(s)", tables, pubs)
		}
	}
	t.Run("slot of another database", func(t *testing.T) {
		other := pgtest.Name(t, "db")
		pgtest.Exec(t, url, "CREATE DATABASE "+other)
		otherURL := strings.Replace(url, "/postgres?", "/"+other+"?", 1)
		ob := relaytest.NewOutbox(t, url)
		pgtest.Exec(t, url, "DROP TABLE "+ob.Table) // a fresh database: cdc init makes the table
		pgtest.Exec(t, otherURL, "SELECT pg_create_logical_replication_slot('"+ob.Slot+"', 'pgoutput')")
		t.Cleanup(func() {
			pgtest.Exec(t, url, "SELECT pg_drop_replication_slot('"+ob.Slot+"')", "DROP DATABASE "+other)
		})
		// Plain init makes the default table; --adopt needs a table with
		// columns.sent_at, made here, on the same slot name.
		adopting := relaytest.NewOutbox(t, url)
		pgtest.Exec(t, url, "ALTER TABLE "+adopting.Table+" ADD COLUMN sent_at timestamptz")
		adopting.Slot = ob.Slot
		for _, c := range []struct {
			ob    relaytest.Outbox
			extra string
			args  []string
		}{{ob, "", []string{"init"}}, {adopting, "columns: {sent_at: sent_at}", []string{"init", "--adopt"}}} {
			cfg := c.ob.Config(t, "  - {name: out, kind: discard}", c.extra)
			code, stdout, stderr := cdc(t, nil, append(c.args, "--config", cfg)...)
			if code == 0 || !strings.Contains(stderr, "belongs to database \""+other+"\"") || !strings.Contains(stderr, "set postgres.slot") ||
				strings.Contains(stderr, "pg_drop_replication_slot") {
				t.Errorf("cdc %s on a slot of database %s: exit %d, want an error saying the slot belongs to it and to set postgres.slot:\n%s%s",
					strings.Join(c.args, " "), other, code, stdout, stderr)
			}
			if c.ob.Table == ob.Table {
				nothingMade(t, url, ob)
			} else if pubs := countPublications(t, url, c.ob.Publication); pubs != 0 {
				t.Errorf("cdc init --adopt failed, yet created the publication")
			}
		}
	})
	t.Run("wal_level replica", func(t *testing.T) {
		cl := pgtest.StartCluster(t, pgtest.Options{Settings: []string{"wal_level = replica"}})
		ob := relaytest.Outbox{URL: cl.URL("postgres"), Table: "public.outbox", Publication: "p", Slot: "s"}
		cfg := ob.Config(t, "  - {name: out, kind: discard}", "")
		code, stdout, stderr := cdc(t, nil, "init", "--config", cfg)
		if code == 0 || !strings.Contains(stderr, "wal_level is replica") || strings.Contains(stdout, "created") {
			t.Errorf("cdc init with wal_level=replica: exit %d, want an error saying to set wal_level = logical, before anything is created:\n%s%s", code, stdout, stderr)
		}
		nothingMade(t, ob.URL, ob)
	})
}

func countPublications(t *testing.T, url, name string) int {
	t.Helper()
	var n int
	if err := pgtest.Connect(t, url).QueryRow(context.Background(), "SELECT count(*) FROM pg_publication WHERE pubname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestIntegrationEachCommandResolvesOnlyTheVariablesItUses: a migrations
// job with only the database's variables runs cdc init; cdc status and
// cdc dead-letter list need neither the sinks' secrets nor
// http.view_token; cdc run, which uses them, still refuses their absence
// (exit 2) naming the variable (docs/operations.md, "What each command
// needs").
func TestIntegrationEachCommandResolvesOnlyTheVariablesItUses(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	cfg := ob.Config(t, "  - {name: sb, kind: servicebus, connection_string: '${WALPOST_TEST_UNSET_SB}', queue: orders}",
		"http: {listen: '127.0.0.1:0', console: true, view_token: '${WALPOST_TEST_UNSET_VIEW_TOKEN}'}")
	relaytest.WithDeadLetterTable(t, url, cfg)
	for _, args := range [][]string{{"init"}, {"status"}, {"dead-letter", "list"}} {
		code, stdout, stderr := cdc(t, nil, append(args, "--config", cfg)...)
		if code != 0 {
			t.Errorf("cdc %s without the sinks' and http's variables: exit %d, want 0:\n%s%s", strings.Join(args, " "), code, stdout, stderr)
		}
	}
	// Several sources in one cdc status (docs/fleet.md): the same.
	ob2 := relaytest.NewOutbox(t, url)
	dir := t.TempDir()
	for name, c := range map[string]string{"a.yaml": cfg, "b.yaml": ob2.Config(t, "  - {name: sb, kind: servicebus, connection_string: '${WALPOST_TEST_UNSET_SB}', queue: orders}", "")} {
		b, err := os.ReadFile(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if code, stdout, stderr := cdc(t, nil, "init", "--config", filepath.Join(dir, "b.yaml")); code != 0 {
		t.Fatalf("cdc init of the second source: exit %d:\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := cdc(t, nil, "status", "--config", filepath.Join(dir, "a.yaml"), "--config", filepath.Join(dir, "b.yaml")); code != 0 {
		t.Errorf("cdc status of two sources without the sinks' and http's variables: exit %d, want 0:\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr := cdc(t, nil, "run", "--config", cfg)
	if code != 2 || !strings.Contains(stderr, "WALPOST_TEST_UNSET_SB is not set") {
		t.Errorf("cdc run without a sink's variable: exit %d, want 2 naming it:\n%s%s", code, stdout, stderr)
	}
}

// TestConfigMistakesAllAtOnceEachAtItsLine: three mistakes in one file are
// three lines of one run's error (exit 2), each with its line; a
// mis-indented key is blamed on its own line, not the one before; an
// unknown sink kind and columns.deliver_at with a sink that cannot
// schedule name their line; cdc help lists cdc run's exit code 3.
func TestConfigMistakesAllAtOnceEachAtItsLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for i, c := range []struct {
		yaml string
		want []string
	}{
		{"postgres:\n  url: postgres://x@127.0.0.1/db\n  slott: s\nrelay: {batch_size: -1}\nsinks:\n  - {name: out, kind: stdout}\nlog: {level: loud}\n",
			[]string{"3 errors:", `postgres.slott: unknown key "slott"`, "(line 3)", "relay.batch_size: -1", "(line 4)", `log.level: "loud"`, "(line 7)"}},
		{"postgres:\n  url: postgres://x@127.0.0.1/db\n sinks:\n  - {name: out, kind: stdout}\n", []string{"did not find expected key", "(line 3)"}},
		{"postgres:\n  url: postgres://x@127.0.0.1/db\nsinks:\n  - name: out\n    kind: fiel\n", []string{`sinks[0].kind: unknown kind "fiel"`, "(line 5)"}},
		{"postgres:\n  url: postgres://x@127.0.0.1/db\ncolumns: {deliver_at: deliver_at}\nsinks:\n  - name: out\n    kind: stdout\n",
			[]string{"columns.deliver_at is mapped, but a stdout sink cannot hold a message back", "(line 6)"}},
		{"postgres:\n  url: postgres://x@127.0.0.1/db\n  slott: s\nsinks:\n  - {name: a, kind: fiel}\n  - {name: b, kind: file}\n",
			[]string{"3 errors:", `postgres.slott: unknown key "slott"`, `unknown kind "fiel" (one of`, "(line 5)", "sinks[1] (b): path: empty", "(line 6)"}},
	} {
		path := filepath.Join(dir, fmt.Sprintf("c%d.yaml", i))
		if err := os.WriteFile(path, []byte(c.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := cdc(t, nil, "run", "--config", path)
		for _, w := range c.want {
			if code != 2 || !strings.Contains(stderr, w) {
				t.Errorf("case %d: exit %d, want 2 and an error with %q:\n%s%s", i, code, w, stdout, stderr)
				break
			}
		}
	}
	if code, stdout, _ := cdc(t, nil, "help"); code != 0 || !strings.Contains(stdout, "cdc run 3 when relay.shutdown_timeout cut its drain") {
		t.Errorf("cdc help: exit %d, want 0 and the exit codes with run's 3:\n%s", code, stdout)
	}
}

// TestIntegrationStatusSaysWhatToFixWhenTheServerRefusesThePassword: cdc
// status with a wrong password says first what the server refused and
// what to fix, as cdc run does, not pgx's "tls error: server refused TLS
// connection" of its first attempt (sslmode=prefer).
func TestIntegrationStatusSaysWhatToFixWhenTheServerRefusesThePassword(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	cdcInit(t, ob.Config(t, "  - {name: out, kind: discard}", ""))
	role := pgtest.Name(t, "pw")
	pgtest.Exec(t, url, "CREATE ROLE "+role+" SUPERUSER LOGIN PASSWORD 'right-Pw-2291'")
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP ROLE IF EXISTS "+role) })
	withHBA(t, url, "host all "+role+" 127.0.0.1/32 scram-sha-256")
	wrong := ob
	wrong.URL = fmt.Sprintf("postgres://%s:wrong-Pw-7730@%s/postgres", role, serverAddr(url))
	code, stdout, stderr := cdc(t, nil, "status", "--config", wrong.Config(t, "  - {name: out, kind: discard}", ""))
	if code != 1 || !strings.HasPrefix(stderr, "cdc status: password authentication failed") ||
		!strings.Contains(stderr, "fix the user, password or database of postgres.url") || strings.Contains(stderr, "wrong-Pw-7730") {
		t.Errorf("cdc status with a wrong password: exit %d, want 1 saying first that the password was refused and what to fix:\n%s%s", code, stdout, stderr)
	}
}

// TestIntegrationSIGTERMWhileASinkFailsSaysWhatTheDrainWaitsFor: SIGTERM
// while the only sink fails (a webhook answering 503) logs at once what
// the drain waits for (the deliveries in flight, the failing sink and its
// error) and for how long (relay.shutdown_timeout), instead of a silence
// of that long before exit 3; each failed attempt's line says how long
// the attempt took (attempt_ms) besides the wait after it (retry_in_ms).
func TestIntegrationSIGTERMWhileASinkFailsSaysWhatTheDrainWaitsFor(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	cfg := ob.Config(t, fmt.Sprintf("  - {name: hook, kind: webhook, url: %q, timeout: 2s}", srv.URL),
		"relay: {shutdown_timeout: 3s, retry_backoff: 200ms}")
	cdcInit(t, cfg)
	p := startCDC(t, "run", "--config", cfg)
	ob.InsertTx(t, pgtest.Connect(t, url), relaytest.NewMsg("t", "k", 1))
	pgtest.Await(t, 60*time.Second, "a failed attempt logged", func() bool { return strings.Contains(p.Stderr.String(), `"retry_in_ms"`) })
	if log := p.Stderr.String(); !strings.Contains(log, `"attempt_ms"`) {
		t.Errorf("the failed attempt's line does not say how long the attempt took:\n%s", log)
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	signalled := time.Now()
	pgtest.Await(t, 2*time.Second, "a log line at the signal saying what the drain waits for", func() bool {
		return strings.Contains(p.Stderr.String(), "stopping: waiting up to relay.shutdown_timeout (3s) for the sinks to acknowledge 1 deliveries in flight")
	})
	if code := p.Wait(30 * time.Second); code != 3 {
		t.Fatalf("exit %d, want 3 (the drain cut)\n%s", code, p.Stderr.String())
	}
	if log := p.Stderr.String(); !strings.Contains(log, `"failing":["hook (`) || !strings.Contains(log, "503") {
		t.Errorf("the line at the signal does not name the failing sink and its error:\n%s", log)
	}
	if took := time.Since(signalled); took < 2*time.Second {
		t.Errorf("exited %v after SIGTERM, before relay.shutdown_timeout", took)
	}
}

// TestIntegrationAColumnNamedInAnotherCaseIsNamed: a column created
// without quotes (EF Core's InviatoIl stored as inviatoil) and mapped as
// written in the model: cdc init and cdc run exit 1 naming the column the
// table has and the mapping to write, as the table's error does for a
// table name.
func TestIntegrationAColumnNamedInAnotherCaseIsNamed(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	pgtest.Exec(t, url, "ALTER TABLE "+ob.Table+" ADD COLUMN InviatoIl timestamptz") // unquoted: stored as inviatoil
	cfg := ob.Config(t, "  - {name: out, kind: discard}", "columns: {sent_at: InviatoIl}")
	for _, cmd := range []string{"init", "run"} {
		code, stdout, stderr := cdc(t, nil, cmd, "--config", cfg)
		stderr = strings.ReplaceAll(stderr, `\"`, `"`) // cdc run logs JSON
		if code != 1 || !strings.Contains(stderr, `no column "InviatoIl", but it has "inviatoil"`) || !strings.Contains(stderr, "set columns.sent_at: inviatoil") {
			t.Errorf("cdc %s with columns.sent_at naming a column folded to lower case: exit %d, want 1 naming inviatoil and the mapping to write:\n%s%s", cmd, code, stdout, stderr)
		}
	}
}
