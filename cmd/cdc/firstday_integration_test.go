package main

import (
	"context"
	"fmt"
	"strings"
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
	code, stdout, stderr := cdc(t, nil, "run", "--config", cfg)
	if code != 2 || !strings.Contains(stderr, "WALPOST_TEST_UNSET_SB is not set") {
		t.Errorf("cdc run without a sink's variable: exit %d, want 2 naming it:\n%s%s", code, stdout, stderr)
	}
}
