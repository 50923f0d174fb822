package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// The publication or the table changing under a running relay
// (docs/design.md, "The publication or the table changing under the
// relay"): every committed row reaches the sink, automatically or through
// the documented way out; the change is logged at error level, shown by a
// metric, and cdc status exits 1 while it lasts.

// pubRelay is a relay on a test's outbox with a file sink and /metrics.
type pubRelay struct {
	url, out, cfg, addr string
	ob                  relaytest.Outbox
	conn                *pgx.Conn
}

func newPubRelay(t *testing.T, url string) *pubRelay {
	t.Helper()
	ob := relaytest.NewOutbox(t, url)
	port, err := pgtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r := &pubRelay{url: url, ob: ob, out: filepath.Join(t.TempDir(), "out.jsonl"), addr: fmt.Sprintf("127.0.0.1:%d", port)}
	r.cfg = ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", r.out), fmt.Sprintf("http: {listen: '%s'}", r.addr))
	cdcInit(t, r.cfg)
	r.conn = pgtest.Connect(t, url)
	return r
}

// status runs cdc status and returns its exit code and output.
func (r *pubRelay) status() (int, string) {
	var b bytes.Buffer
	code := run([]string{"status", "--config", r.cfg}, &b, &b)
	return code, b.String()
}

// waitStatus waits until cdc status exits code with want in its output.
func (r *pubRelay) waitStatus(t *testing.T, code int, want string, p *proc) {
	t.Helper()
	var got int
	var msg string
	if !pgtest.WaitFor(30*time.Second, func() bool {
		got, msg = r.status()
		return got == code && strings.Contains(msg, want)
	}) {
		t.Fatalf("cdc status: exit %d, want %d with %q:\n%s\nrelay:\n%s", got, code, want, msg, p.Stderr.String())
	}
}

// metric returns the value of a metric without labels ("" when absent).
func (r *pubRelay) metric(t *testing.T, name string) string {
	t.Helper()
	_, _, body := get(t, r.addr, "/metrics", "")
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return m[1]
}

func (r *pubRelay) waitMetric(t *testing.T, name, want string, p *proc) {
	t.Helper()
	if !pgtest.WaitFor(30*time.Second, func() bool { return r.metric(t, name) == want }) {
		t.Fatalf("%s is %q, want %s\n%s", name, r.metric(t, name), want, p.Stderr.String())
	}
}

// waitAll waits until every message the producer committed, and extra,
// is in the sink.
func (r *pubRelay) waitAll(t *testing.T, prod *relaytest.Producer, p *proc, extra ...relaytest.Msg) {
	t.Helper()
	committed := prod.Committed(t, r.conn)
	for _, m := range extra {
		committed[m.ID] = relaytest.Seq{}
	}
	if len(committed) == 0 {
		t.Fatal("the producer committed nothing")
	}
	if !pgtest.WaitFor(60*time.Second, func() bool {
		return relaytest.CountLines(r.out) >= len(committed) && relaytest.AllDelivered(committed, relaytest.ReadLines(t, r.out))
	}) {
		lines := relaytest.ReadLines(t, r.out)
		seen := map[string]bool{}
		for _, l := range lines {
			seen[l.ID] = true
		}
		var missing []string
		for id := range committed {
			if !seen[id] {
				missing = append(missing, id)
			}
		}
		t.Fatalf("%d of %d committed messages never delivered (e.g. %v)\n%s", len(missing), len(committed), missing[:min(3, len(missing))], p.Stderr.String())
	}
}

// errorLogged reports whether the relay logged, at error level, a line
// containing want.
func errorLogged(p *proc, want string) bool {
	for _, l := range strings.Split(p.Stderr.String(), "\n") {
		if strings.Contains(l, `"level":"error"`) && strings.Contains(l, want) {
			return true
		}
	}
	return false
}

// TestIntegrationPublicationDropAndAddTableLosesNothing: ALTER
// PUBLICATION … DROP TABLE outbox, rows written, ADD TABLE outbox, while
// a producer writes. pgoutput leaves the rows in between out of the
// stream without a word; the relay sees the outbox unpublished (error
// log, walpost_outbox_not_published 1, cdc status exits 1), and once it is
// published again relays the rows the stream did not carry from the table,
// with their own ids: every committed row is delivered, cdc status exits
// 0. A DROP and ADD faster than the relay looks is seen too (another
// pg_publication_rel row).
func TestIntegrationPublicationDropAndAddTableLosesNothing(t *testing.T) {
	t.Parallel()
	publicationDropAndAddTable(t, pgtest.URL(t))
}

// publicationDropAndAddTable is
// TestIntegrationPublicationDropAndAddTableLosesNothing on the database at
// url (also TestIntegrationVersions).
func publicationDropAndAddTable(t *testing.T, url string) {
	r := newPubRelay(t, url)
	p := startCDC(t, "run", "--config", r.cfg)
	prod := r.ob.StartProducer(t, 4, 5*time.Millisecond)
	if !pgtest.WaitFor(30*time.Second, func() bool { return relaytest.CountLines(r.out) > 0 }) {
		t.Fatalf("nothing delivered\n%s", p.Stderr.String())
	}
	r.waitStatus(t, 0, "", p)

	pgtest.Exec(t, r.url, "ALTER PUBLICATION "+r.ob.Publication+" DROP TABLE "+r.ob.Table)
	in := relaytest.NewMsg("between", "k", 1)
	r.ob.InsertTx(t, r.conn, in)
	r.waitStatus(t, 1, "the outbox is not published", p)
	r.waitMetric(t, "walpost_outbox_not_published", "1", p)
	if code, st, _ := statusJSONOf(t, r.cfg); code != 1 || !strings.Contains(fmt.Sprint(st["outbox_warnings"]), "the outbox is not published") {
		t.Errorf("status --json: exit %d, outbox_warnings %v", code, st["outbox_warnings"])
	}
	if !pgtest.WaitFor(10*time.Second, func() bool { return errorLogged(p, "does not publish the outbox") }) {
		t.Fatalf("no error logged:\n%s", p.Stderr.String())
	}
	pgtest.Exec(t, r.url, "ALTER PUBLICATION "+r.ob.Publication+" ADD TABLE "+r.ob.Table)
	r.waitMetric(t, "walpost_outbox_not_published", "0", p)
	r.waitMetric(t, "walpost_stream_gap_open", "0", p) // relayed from the table
	r.waitStatus(t, 0, "", p)

	// Faster than the relay looks: one round trip each.
	fast := relaytest.NewMsg("fast", "k", 2)
	pgtest.Exec(t, r.url, "ALTER PUBLICATION "+r.ob.Publication+" DROP TABLE "+r.ob.Table)
	r.ob.InsertTx(t, r.conn, fast)
	pgtest.Exec(t, r.url, "ALTER PUBLICATION "+r.ob.Publication+" ADD TABLE "+r.ob.Table)

	time.Sleep(500 * time.Millisecond) // the producer writes on
	prod.Stop()
	r.waitAll(t, prod, p, in, fast)
	r.waitStatus(t, 0, "", p)
	r.waitMetric(t, "walpost_stream_gap_open", "0", p)
	if g := r.metric(t, "walpost_stream_gaps_total"); g != "2" {
		t.Errorf("walpost_stream_gaps_total %s, want 2", g)
	}
	if n := r.metric(t, "walpost_gap_rows_relayed_total"); n == "0" || n == "" {
		t.Errorf("walpost_gap_rows_relayed_total %q, want the rows in between", n)
	}
	if !errorLogged(p, "what publishes the outbox changed") {
		t.Errorf("the change was not logged at error level:\n%s", p.Stderr.String())
	}
	// Only the rows the stream did not carry came from the table: no id
	// twice (the relay did not restart).
	lines := relaytest.ReadLines(t, r.out)
	ids := map[string]bool{}
	for _, l := range lines {
		ids[l.ID] = true
	}
	t.Logf("%d lines, %d ids, %s relayed from the table", len(lines), len(ids), r.metric(t, "walpost_gap_rows_relayed_total"))
	if len(ids) != len(lines) {
		t.Errorf("%d lines for %d ids: rows the stream carried were relayed again", len(lines), len(ids))
	}
}

// TestIntegrationRenamedOutboxLosesNothing: ALTER TABLE outbox RENAME TO
// x, rows written, renamed back: the decoder knows the outbox by its OID,
// so the rows are relayed (with a warning); cdc status exits 1 while the
// configured table does not exist, 0 after.
func TestIntegrationRenamedOutboxLosesNothing(t *testing.T) {
	t.Parallel()
	r := newPubRelay(t, pgtest.URL(t))
	p := startCDC(t, "run", "--config", r.cfg)
	prod := r.ob.StartProducer(t, 4, 5*time.Millisecond)
	if !pgtest.WaitFor(30*time.Second, func() bool { return relaytest.CountLines(r.out) > 0 }) {
		t.Fatalf("nothing delivered\n%s", p.Stderr.String())
	}
	renamed := r.ob.Table + "_renamed"
	pgtest.Exec(t, r.url, "ALTER TABLE "+r.ob.Table+" RENAME TO "+strings.TrimPrefix(renamed, "public."))
	in := relaytest.NewMsg("renamed", "k", 1)
	renamedOutbox := r.ob
	renamedOutbox.Table = renamed
	renamedOutbox.InsertTx(t, r.conn, in)
	r.waitStatus(t, 1, "does not exist (renamed or dropped)", p)
	pgtest.Exec(t, r.url, "ALTER TABLE "+renamed+" RENAME TO "+strings.TrimPrefix(r.ob.Table, "public."))
	time.Sleep(300 * time.Millisecond)
	prod.Stop()
	r.waitAll(t, prod, p, in)
	r.waitStatus(t, 0, "", p)
	if !strings.Contains(p.Stderr.String(), "the outbox table was renamed") {
		t.Errorf("no warning for the renamed outbox:\n%s", p.Stderr.String())
	}
}

// TestIntegrationRenamedColumnLosesNothing: a column renamed and renamed
// back, rows written in between, under a running relay and while it is
// stopped: the Relation message with the other name maps by position
// (same column count and types as the last that mapped), so nothing
// wedges and every row is delivered.
func TestIntegrationRenamedColumnLosesNothing(t *testing.T) {
	t.Parallel()
	r := newPubRelay(t, pgtest.URL(t))
	p := startCDC(t, "run", "--config", r.cfg)
	first := relaytest.NewMsg("first", "k", 0)
	r.ob.InsertTx(t, r.conn, first)
	if !pgtest.WaitFor(30*time.Second, func() bool { return relaytest.CountLines(r.out) > 0 }) {
		t.Fatalf("nothing delivered\n%s", p.Stderr.String())
	}
	ctx := context.Background()
	insert := func(n int) relaytest.Msg {
		m := relaytest.NewMsg("renamed.col", "k", n)
		if _, err := r.conn.Exec(ctx, "INSERT INTO "+r.ob.Table+" (id, kind, key, payload) VALUES ($1, $2, $3, $4)", m.ID, m.Type, m.Key, m.Payload); err != nil {
			t.Fatal(err)
		}
		return m
	}
	rename := func(from, to string) {
		pgtest.Exec(t, r.url, fmt.Sprintf("ALTER TABLE %s RENAME COLUMN %s TO %s", r.ob.Table, from, to))
	}
	rename("type", "kind")
	a := insert(1)
	rename("kind", "type")
	after := relaytest.NewMsg("after", "k", 2)
	r.ob.InsertTx(t, r.conn, after)
	relaytest.WaitAllDelivered(t, r.out, []relaytest.Msg{first, a, after}, 30*time.Second, p.Stderr.String)

	// While the relay is stopped: its next start sees the renamed
	// Relation first, and maps it against the table's columns now.
	p.Stop(t)
	rename("type", "kind")
	b := insert(3)
	rename("kind", "type")
	p = startCDC(t, "run", "--config", r.cfg)
	relaytest.WaitAllDelivered(t, r.out, []relaytest.Msg{first, a, after, b}, 30*time.Second, p.Stderr.String)
	for _, l := range relaytest.ReadLines(t, r.out) {
		if (l.ID == a.ID || l.ID == b.ID) && l.Type != "renamed.col" {
			t.Fatalf("row %s delivered with type %q", l.ID, l.Type)
		}
	}
	if !strings.Contains(p.Stderr.String(), "mapped by position") {
		t.Errorf("no warning for the renamed column:\n%s", p.Stderr.String())
	}
}

// TestIntegrationPublicationDroppedAndCreatedAgainLosesNothing: DROP
// PUBLICATION, rows written, CREATE PUBLICATION again, while a producer
// writes. The WAL sender decodes the WAL in between with the catalog of
// its time and fails ("publication … does not exist") at every start:
// the relay stops with that message and the advice to run cdc resync
// (not cdc init); cdc status exits 1. Following the advice delivers
// every committed row, and cdc status exits 0. (If the stream gets through
// — nothing decoded between the drop and the creation — the relay
// relays the rows in between from the table by itself.)
func TestIntegrationPublicationDroppedAndCreatedAgainLosesNothing(t *testing.T) {
	t.Parallel()
	r := newPubRelay(t, pgtest.URL(t))
	p := startCDC(t, "run", "--config", r.cfg)
	prod := r.ob.StartProducer(t, 4, 5*time.Millisecond)
	if !pgtest.WaitFor(30*time.Second, func() bool { return relaytest.CountLines(r.out) > 0 }) {
		t.Fatalf("nothing delivered\n%s", p.Stderr.String())
	}
	pgtest.Exec(t, r.url, "DROP PUBLICATION "+r.ob.Publication)
	in := relaytest.NewMsg("between", "k", 1)
	r.ob.InsertTx(t, r.conn, in)
	time.Sleep(1500 * time.Millisecond) // the relay looks meanwhile
	pgtest.Exec(t, r.url, "CREATE PUBLICATION "+r.ob.Publication+" FOR TABLE "+r.ob.Table+" WITH (publish = 'insert')")
	time.Sleep(500 * time.Millisecond)
	prod.Stop()

	code := p.Wait(30 * time.Second)
	if code == -1 {
		t.Log("the stream got through: the relay relays the rows in between by itself")
		r.waitAll(t, prod, p, in)
		r.waitStatus(t, 0, "", p)
		return
	}
	msg := p.Stderr.String()
	m := regexp.MustCompile(`run: (cdc resync --config \S+)`).FindStringSubmatch(msg)
	if code != 1 || !strings.Contains(msg, "does not exist") || m == nil || strings.Contains(msg, "run 'cdc init'") {
		t.Fatalf("exit %d, want 1 with the server's message and the advice to run cdc resync:\n%s", code, msg)
	}
	if !strings.Contains(msg, `"level":"error"`) {
		t.Errorf("the stop was not logged at error level:\n%s", msg)
	}
	r.waitStatus(t, 1, "may not be in the replication stream", p)
	// A restart stops at the same place.
	again := startCDC(t, "run", "--config", r.cfg)
	if code := again.Wait(30 * time.Second); code != 1 || !strings.Contains(again.Stderr.String(), "cdc resync") {
		t.Fatalf("restart: exit %d, want 1 with the advice again\n%s", code, again.Stderr.String())
	}
	// The advice, as given.
	args := strings.Fields(m[1])[1:]
	var b bytes.Buffer
	if code := run(args, &b, &b); code != 0 {
		t.Fatalf("%s: exit %d\n%s", m[1], code, b.String())
	}
	r.waitStatus(t, 0, "", p)
	later := relaytest.NewMsg("later", "k", 2)
	r.ob.InsertTx(t, r.conn, later)
	p = startCDC(t, "run", "--config", r.cfg)
	r.waitAll(t, prod, p, in, later)
}

// TestIntegrationForeignRelationInTheStreamIsAnError: a table that is not
// the outbox added to the publication: its rows are skipped, the relay
// logs it at error level once, counts it (walpost_foreign_relations_total)
// and cdc status exits 1 until it is removed.
func TestIntegrationForeignRelationInTheStreamIsAnError(t *testing.T) {
	t.Parallel()
	r := newPubRelay(t, pgtest.URL(t))
	other := r.ob.Table + "_other"
	pgtest.Exec(t, r.url, "CREATE TABLE "+other+" (id int)")
	t.Cleanup(func() { pgtest.Exec(t, r.url, "DROP TABLE IF EXISTS "+other) })
	p := startCDC(t, "run", "--config", r.cfg)
	m1 := relaytest.NewMsg("one", "k", 1)
	r.ob.InsertTx(t, r.conn, m1)
	relaytest.WaitAllDelivered(t, r.out, []relaytest.Msg{m1}, 30*time.Second, p.Stderr.String)
	pgtest.Exec(t, r.url, "ALTER PUBLICATION "+r.ob.Publication+" ADD TABLE "+other, "INSERT INTO "+other+" VALUES (1), (2)")
	m2 := relaytest.NewMsg("two", "k", 2)
	r.ob.InsertTx(t, r.conn, m2)
	relaytest.WaitAllDelivered(t, r.out, []relaytest.Msg{m1, m2}, 30*time.Second, p.Stderr.String)
	r.waitMetric(t, "walpost_foreign_relations_total", "1", p)
	if !errorLogged(p, "is not the outbox") {
		t.Fatalf("no error logged:\n%s", p.Stderr.String())
	}
	r.waitStatus(t, 1, "also publishes "+other, p)
	pgtest.Exec(t, r.url, "ALTER PUBLICATION "+r.ob.Publication+" DROP TABLE "+other)
	r.waitStatus(t, 0, "", p)
	if n := relaytest.CountLines(r.out); n != 2 {
		t.Fatalf("%d lines, want the 2 outbox rows only", n)
	}
}

// TestIntegrationUnmappableRelationStopsWithAdviceThatWorks: a column
// renamed and retyped while the relay is stopped, a row written in
// between, then renamed back: the stream carries that row with a Relation
// that neither maps by name nor by position. The relay stops there at
// every start (the WAL does not change); its advice, cdc resync, relays
// the row from the table and moves the slot past it.
func TestIntegrationUnmappableRelationStopsWithAdviceThatWorks(t *testing.T) {
	t.Parallel()
	r := newPubRelay(t, pgtest.URL(t))
	p := startCDC(t, "run", "--config", r.cfg)
	first := relaytest.NewMsg("first", "k", 0)
	r.ob.InsertTx(t, r.conn, first)
	relaytest.WaitAllDelivered(t, r.out, []relaytest.Msg{first}, 30*time.Second, p.Stderr.String)
	p.Stop(t)
	pgtest.Exec(t, r.url, "ALTER TABLE "+r.ob.Table+" RENAME COLUMN type TO kind")
	m := relaytest.NewMsg("renamed.col", "k", 1)
	if _, err := r.conn.Exec(context.Background(), "INSERT INTO "+r.ob.Table+" (id, kind, key, payload) VALUES ($1, $2, $3, $4)", m.ID, m.Type, m.Key, m.Payload); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, r.url, "ALTER TABLE "+r.ob.Table+" ALTER COLUMN kind TYPE varchar(200)", "ALTER TABLE "+r.ob.Table+" RENAME COLUMN kind TO type")
	var advice string
	for attempt := range 2 { // the same stop at every start
		p = startCDC(t, "run", "--config", r.cfg)
		code := p.Wait(60 * time.Second)
		msg := p.Stderr.String()
		found := regexp.MustCompile(`run: (cdc resync --config \S+)`).FindStringSubmatch(msg)
		if code != 1 || found == nil || !strings.Contains(msg, "lacks mapped column") {
			t.Fatalf("run %d: exit %d, want 1 with the advice to run cdc resync:\n%s", attempt, code, msg)
		}
		advice = found[1]
	}
	var b bytes.Buffer
	if code := run(strings.Fields(advice)[1:], &b, &b); code != 0 {
		t.Fatalf("%s: exit %d\n%s", advice, code, b.String())
	}
	after := relaytest.NewMsg("after", "k", 2)
	r.ob.InsertTx(t, r.conn, after)
	p = startCDC(t, "run", "--config", r.cfg)
	relaytest.WaitAllDelivered(t, r.out, []relaytest.Msg{first, m, after}, 30*time.Second, p.Stderr.String)
	r.waitStatus(t, 0, "", p)
}

// TestIntegrationPublicationChangedWhileStoppedLosesNothing: DROP TABLE
// from the publication, a row, ADD TABLE, while no relay runs: cdc status
// says what publishes the outbox changed since a relay last looked (exit
// 1), and the next cdc run relays the row from the table (the coverage
// table kept what the last relay saw).
func TestIntegrationPublicationChangedWhileStoppedLosesNothing(t *testing.T) {
	t.Parallel()
	r := newPubRelay(t, pgtest.URL(t))
	p := startCDC(t, "run", "--config", r.cfg)
	first := relaytest.NewMsg("first", "k", 0)
	r.ob.InsertTx(t, r.conn, first)
	relaytest.WaitAllDelivered(t, r.out, []relaytest.Msg{first}, 30*time.Second, p.Stderr.String)
	p.Stop(t)
	pgtest.Exec(t, r.url, "ALTER PUBLICATION "+r.ob.Publication+" DROP TABLE "+r.ob.Table)
	in := relaytest.NewMsg("between", "k", 1)
	r.ob.InsertTx(t, r.conn, in)
	pgtest.Exec(t, r.url, "ALTER PUBLICATION "+r.ob.Publication+" ADD TABLE "+r.ob.Table)
	after := relaytest.NewMsg("after", "k", 2)
	r.ob.InsertTx(t, r.conn, after)
	r.waitStatus(t, 1, "what publishes the outbox changed since a relay last looked", p)

	p = startCDC(t, "run", "--config", r.cfg)
	relaytest.WaitAllDelivered(t, r.out, []relaytest.Msg{first, in, after}, 30*time.Second, p.Stderr.String)
	r.waitStatus(t, 0, "", p)
	// A new process does not know what the last one carried: rows of the
	// window it delivered already may come again (at-least-once).
	t.Logf("%d lines for 3 rows", relaytest.CountLines(r.out))
}

// TestIntegrationGapFillFollowsOnInvalid: a row the relay reads from the
// table to fill a publication gap and cannot map (its headers are not a
// JSON object) follows relay.on_invalid as a bad row of the stream does.
// Before, it was logged, left out, and the gap closed: neither delivered
// nor parked. Under dead_letter it is parked with its id and the other
// rows of the gap are delivered; under stop the relay exits 1 at it,
// saying that cdc skip cannot park it and that fixing the row in the
// table does, and after an UPDATE of the row a restart delivers every row;
// under hold_key it holds its key (the key's next row of the gap is parked
// behind it).
func TestIntegrationGapFillFollowsOnInvalid(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"dead_letter", "hold_key", "stop"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			url := pgtest.URL(t)
			ob := relaytest.NewOutbox(t, url)
			out := filepath.Join(t.TempDir(), "out.jsonl")
			cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "relay: {on_invalid: "+policy+"}")
			relaytest.WithDeadLetterTable(t, url, cfg)
			cdcInit(t, cfg)
			conn := pgtest.Connect(t, url)
			p := startCDC(t, "run", "--config", cfg)
			first := relaytest.NewMsg("before", "k", 1)
			ob.InsertTx(t, conn, first)
			relaytest.WaitAllDelivered(t, out, []relaytest.Msg{first}, 60*time.Second, p.Stderr.String)

			pgtest.Exec(t, url, "ALTER PUBLICATION "+ob.Publication+" DROP TABLE "+ob.Table)
			good1, bad, good2 := relaytest.NewMsg("gap", "k", 2), relaytest.NewMsg("gap.bad", "k", 3), relaytest.NewMsg("gap", "k", 4)
			ob.InsertTx(t, conn, good1)
			if _, err := conn.Exec(context.Background(), "INSERT INTO "+ob.Table+" (id, type, key, payload, headers) VALUES ($1, $2, $3, '{}', '[1]')", bad.ID, bad.Type, bad.Key); err != nil {
				t.Fatal(err)
			}
			ob.InsertTx(t, conn, good2)
			if !pgtest.WaitFor(30*time.Second, func() bool { return errorLogged(p, "does not publish the outbox") }) {
				t.Fatalf("the relay did not see the outbox unpublished:\n%s", p.Stderr.String())
			}
			pgtest.Exec(t, url, "ALTER PUBLICATION "+ob.Publication+" ADD TABLE "+ob.Table)

			if policy == "hold_key" {
				// The bad row holds its key k: good2, after it, is parked
				// behind it; good1, before it, is delivered.
				relaytest.WaitAllDelivered(t, out, []relaytest.Msg{first, good1}, 60*time.Second, p.Stderr.String)
				var parked []parkedRow
				pgtest.WaitFor(30*time.Second, func() bool { parked = listParked(t, cfg); return len(parked) >= 2 })
				p.Stop(t)
				if ids, want := parkedIDs(parked), msgIDs(bad, good2); !slices.Equal(ids, want) {
					t.Fatalf("parked %v, want the bad row and the row of its key behind it %v", ids, want)
				}
				if relaytest.AllDelivered(map[string]relaytest.Seq{good2.ID: {}}, relaytest.ReadLines(t, out)) {
					t.Fatalf("the row behind the held key's head was delivered")
				}
				return
			}
			if policy == "dead_letter" {
				relaytest.WaitAllDelivered(t, out, []relaytest.Msg{first, good1, good2}, 60*time.Second, p.Stderr.String)
				var parked []parkedRow
				pgtest.WaitFor(30*time.Second, func() bool { parked = listParked(t, cfg); return len(parked) > 0 })
				p.Stop(t)
				if len(parked) != 1 || parked[0].ID == nil || *parked[0].ID != bad.ID {
					t.Fatalf("parked %+v, want the bad row %s of the gap", parked, bad.ID)
				}
				return
			}
			if code := p.Wait(60 * time.Second); code != 1 {
				t.Fatalf("cdc run exited %d at a bad row of a gap fill under on_invalid: stop, want 1\n%s", code, p.Stderr.String())
			}
			for _, want := range []string{bad.ID, "cdc skip cannot park it", "UPDATE", "relay.on_invalid: dead_letter"} {
				if !strings.Contains(p.Stderr.String(), want) {
					t.Errorf("cdc run's error does not say %q:\n%s", want, p.Stderr.String())
				}
			}
			if relaytest.AllDelivered(map[string]relaytest.Seq{bad.ID: {}}, relaytest.ReadLines(t, out)) {
				t.Fatalf("the bad row was delivered")
			}
			pgtest.Exec(t, url, "UPDATE "+ob.Table+" SET headers = '{}' WHERE id = '"+bad.ID+"'")
			p = startCDC(t, "run", "--config", cfg)
			relaytest.WaitAllDelivered(t, out, []relaytest.Msg{first, good1, bad, good2}, 60*time.Second, p.Stderr.String)
			p.Stop(t)
		})
	}
}
