package main

import (
	"context"
	"encoding/json"
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

// lostSlotCluster is the cluster the lost-slot tests share, whose slots
// lose their WAL past 1 MB (max_slot_wal_keep_size). Its tests run one
// after another (no t.Parallel): writing WAL to lose one test's slot would
// lose every other slot that lags on it.
func lostSlotCluster(t *testing.T) *pgtest.Cluster {
	t.Helper()
	return pgtest.NamedCluster(t, "lost-slot", pgtest.Options{Settings: []string{"max_slot_wal_keep_size = 1MB"}})
}

// lostSlotOutbox makes an outbox with a file sink on the lost-slot
// cluster (cdc init run). extra is the config's extra YAML; alter, run
// before cdc init, changes the table (e.g. adds a sent_at column).
func lostSlotOutbox(t *testing.T, extra string, alter ...string) (url string, ob relaytest.Outbox, out, cfg string) {
	t.Helper()
	return lostSlotOutboxOn(t, lostSlotCluster(t).URL("postgres"), extra, alter...)
}

// lostSlotOutboxOn is lostSlotOutbox on the database at url, whose server
// has a small max_slot_wal_keep_size.
func lostSlotOutboxOn(t *testing.T, url, extra string, alter ...string) (_ string, ob relaytest.Outbox, out, cfg string) {
	t.Helper()
	ob = relaytest.NewOutbox(t, url)
	for _, a := range alter {
		pgtest.Exec(t, url, fmt.Sprintf(a, ob.Table))
	}
	out = filepath.Join(t.TempDir(), "out.jsonl")
	cfg = ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), extra)
	cdcInit(t, cfg)
	return url, ob, out, cfg
}

// walStatus reads the slot's wal_status ("" when it does not exist).
func walStatus(t *testing.T, conn *pgx.Conn, slot string) string {
	t.Helper()
	var s *string
	err := conn.QueryRow(context.Background(), "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&s)
	if err == pgx.ErrNoRows || s == nil {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return *s
}

// writeWAL writes about 1 MB of WAL to another table and switches to a
// new WAL segment, between each call of between (may be nil), until
// until says so; with checkpoint, a CHECKPOINT follows each switch (it
// removes the WAL past max_slot_wal_keep_size, invalidating the slot).
func writeWAL(t *testing.T, url string, checkpoint bool, between func(), until func() bool) {
	t.Helper()
	conn := pgtest.Connect(t, url)
	pgtest.Exec(t, url, "CREATE TABLE IF NOT EXISTS walpost_filler (n int, pad text)", "TRUNCATE walpost_filler")
	ctx := context.Background()
	deadline := time.Now().Add(90 * time.Second)
	for !until() {
		if time.Now().After(deadline) {
			t.Fatal("the slot did not reach the WAL status wanted within 90 s")
		}
		stmts := []string{"INSERT INTO walpost_filler SELECT g, repeat('x', 200) FROM generate_series(1, 4000) g", "SELECT pg_switch_wal()"}
		if checkpoint {
			stmts = append(stmts, "CHECKPOINT")
		}
		for _, s := range stmts {
			if _, err := conn.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		if between != nil {
			between()
		}
	}
}

// invalidate makes the server invalidate the slot (wal_status lost).
func invalidate(t *testing.T, url, slot string, between func()) {
	t.Helper()
	conn := pgtest.Connect(t, url)
	writeWAL(t, url, true, between, func() bool { return walStatus(t, conn, slot) == "lost" })
}

// TestIntegrationRunOnAnInvalidatedSlotStopsWithTheServersDetailAndTheWayOut:
// a relay streaming when the server invalidates its slot
// (max_slot_wal_keep_size) exits 1 promptly, instead of retrying for ever,
// with the server's message and DETAIL and the way out (cdc recover
// --config F); a relay started on the invalidated slot does the same.
func TestIntegrationRunOnAnInvalidatedSlotStopsWithTheServersDetailAndTheWayOut(t *testing.T) {
	runOnAnInvalidatedSlot(t, lostSlotCluster(t).URL("postgres"))
}

// runOnAnInvalidatedSlot is
// TestIntegrationRunOnAnInvalidatedSlotStopsWithTheServersDetailAndTheWayOut
// on the database at url, whose server has max_slot_wal_keep_size = 1MB
// (also TestIntegrationVersions).
func runOnAnInvalidatedSlot(t *testing.T, url string) {
	url, ob, out, cfg := lostSlotOutboxOn(t, url, "")
	conn := pgtest.Connect(t, url)
	p := startCDC(t, "run", "--config", cfg)
	first := relaytest.NewMsg("t", "k", 1)
	ob.InsertTx(t, conn, first)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{first}, 30*time.Second, p.Stderr.String)
	invalidate(t, url, ob.Slot, nil)
	lost := time.Now()
	code := p.Wait(30 * time.Second)
	took := time.Since(lost)
	check := func(when string, code int, stderr string) {
		t.Helper()
		last := lastLine(stderr)
		t.Logf("%s: %s", when, last)
		// The server's DETAIL: "This slot has been invalidated because …"
		// (14–17), "This replication slot has been invalidated due to …" (18).
		for _, want := range []string{"was invalidated by the server", "wal_status lost", "DETAIL: This ", "has been invalidated",
			"cdc recover --config " + cfg} {
			if !strings.Contains(last, want) {
				t.Errorf("%s: the error does not say %q:\n%s", when, want, last)
			}
		}
		if code != 1 {
			t.Errorf("%s: cdc run exited %d, want 1\n%s", when, code, stderr)
		}
	}
	check("streaming", code, p.Stderr.String())
	t.Logf("the slot invalidated while streaming: cdc run exited %d, %v after the slot was seen lost", code, took.Round(time.Millisecond))
	if took > 20*time.Second {
		t.Errorf("cdc run took %v to stop after the slot was lost", took)
	}
	p = startCDC(t, "run", "--config", cfg)
	start := time.Now()
	code = p.Wait(30 * time.Second)
	check("at start", code, p.Stderr.String())
	t.Logf("started on the invalidated slot: exit %d after %v", code, time.Since(start).Round(time.Millisecond))
}

// TestIntegrationStatusWarnsOfAnUnreservedSlotAndFailsOnALostOne: cdc
// status warns, exit 0, while the slot's WAL is beyond
// max_slot_wal_keep_size (wal_status unreserved), and exits 1 once the
// slot is lost, saying to run cdc recover; --json gives wal_status,
// safe_wal_size and invalidation_reason.
func TestIntegrationStatusWarnsOfAnUnreservedSlotAndFailsOnALostOne(t *testing.T) {
	url, ob, _, cfg := lostSlotOutbox(t, "")
	conn := pgtest.Connect(t, url)
	code, stdout, stderr := relaytest.Run(t, os.Args[0], []string{"WALPOST_CDC_MAIN=1"}, "status", "--config", cfg)
	if code != 0 || !strings.Contains(stdout, "WAL status:    reserved") {
		t.Fatalf("a reserved slot: status exit %d\n%s%s", code, stdout, stderr)
	}
	writeWAL(t, url, false, nil, func() bool { return walStatus(t, conn, ob.Slot) == "unreserved" })
	code, stdout, stderr = relaytest.Run(t, os.Args[0], []string{"WALPOST_CDC_MAIN=1"}, "status", "--config", cfg)
	if code != 0 || !strings.Contains(stdout, "warning:       wal_status unreserved") {
		t.Errorf("an unreserved slot: status exit %d, want 0 and a warning\n%s%s", code, stdout, stderr)
	}
	invalidate(t, url, ob.Slot, nil)
	code, stdout, stderr = relaytest.Run(t, os.Args[0], []string{"WALPOST_CDC_MAIN=1"}, "status", "--config", cfg)
	if code != 1 || !strings.Contains(stdout, "WAL status:    lost") || !strings.Contains(stdout, "retained WAL:  none") ||
		!strings.Contains(stderr, "cdc recover --config "+cfg) {
		t.Errorf("a lost slot: status exit %d, want 1 saying cdc recover\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr = relaytest.Run(t, os.Args[0], []string{"WALPOST_CDC_MAIN=1"}, "status", "--json", "--config", cfg)
	var st map[string]any
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatalf("--json: %v\n%s", err, stdout)
	}
	if code != 1 || st["wal_status"] != "lost" || st["invalidation_reason"] == nil || st["lag_bytes"] == float64(0) {
		t.Errorf("--json of a lost slot: exit %d, wal_status %v, invalidation_reason %v, lag_bytes %v\n%s", code, st["wal_status"], st["invalidation_reason"], st["lag_bytes"], stderr)
	}
	if _, ok := st["safe_wal_size"]; !ok {
		t.Error("--json has no safe_wal_size")
	}
}

// recoverAndDeliver is the way out of a lost slot as a user takes it: cdc
// run stops (exit 1), cdc recover, cdc run again; then every id of want
// reaches the file sink. It returns what cdc recover printed.
func recoverAndDeliver(t *testing.T, cfg, out string, want []relaytest.Msg, recoverArgs ...string) string {
	t.Helper()
	p := startCDC(t, "run", "--config", cfg)
	if code := p.Wait(30 * time.Second); code != 1 {
		t.Fatalf("cdc run on the lost slot exited %d, want 1\n%s", code, p.Stderr.String())
	}
	code, stdout, stderr := relaytest.Run(t, os.Args[0], []string{"WALPOST_CDC_MAIN=1"}, append([]string{"recover", "--config", cfg}, recoverArgs...)...)
	if code != 0 {
		t.Fatalf("cdc recover exited %d\n%s%s", code, stdout, stderr)
	}
	p = startCDC(t, "run", "--config", cfg)
	relaytest.WaitAllDelivered(t, out, want, 60*time.Second, p.Stderr.String)
	p.Stop(t)
	return stdout
}

// copies counts the lines of each id.
func copies(lines []relaytest.Line) map[string]int {
	n := map[string]int{}
	for _, l := range lines {
		n[l.ID]++
	}
	return n
}

// TestIntegrationRecoverRelaysEveryRowWhoseSentAtIsNull: rows delivered
// and marked sent, the relay stopped, more rows committed (pending), the
// slot invalidated: after cdc recover and cdc run every committed row is
// in the file; with columns.sent_at the rows already sent are not sent
// again.
func TestIntegrationRecoverRelaysEveryRowWhoseSentAtIsNull(t *testing.T) {
	recoverRelaysEveryRowWhoseSentAtIsNull(t, lostSlotCluster(t).URL("postgres"))
}

// recoverRelaysEveryRowWhoseSentAtIsNull is
// TestIntegrationRecoverRelaysEveryRowWhoseSentAtIsNull on the database at
// url, whose server has max_slot_wal_keep_size = 1MB (also
// TestIntegrationVersions).
func recoverRelaysEveryRowWhoseSentAtIsNull(t *testing.T, url string) {
	url, ob, out, cfg := lostSlotOutboxOn(t, url, "columns: {sent_at: sent_at}", "ALTER TABLE %s ADD COLUMN sent_at timestamptz")
	conn := pgtest.Connect(t, url)
	ctx := context.Background()
	var sent, pending []relaytest.Msg
	for i := range 10 {
		sent = append(sent, relaytest.NewMsg("t", fmt.Sprint("k", i%3), i))
	}
	p := startCDC(t, "run", "--config", cfg)
	for i := 0; i < len(sent); i += 2 {
		ob.InsertTx(t, conn, sent[i:i+2]...)
	}
	relaytest.WaitAllDelivered(t, out, sent, 30*time.Second, p.Stderr.String)
	pgtest.Await(t, 30*time.Second, "every delivered row marked sent", func() bool {
		var n int
		conn.QueryRow(ctx, "SELECT count(*) FROM "+ob.Table+" WHERE sent_at IS NULL").Scan(&n)
		return n == 0
	})
	p.Stop(t)
	for i := range 10 {
		m := relaytest.NewMsg("t", fmt.Sprint("k", i%3), 100+i)
		pending = append(pending, m)
		ob.InsertTx(t, conn, m)
	}
	invalidate(t, url, ob.Slot, nil)
	report := recoverAndDeliver(t, cfg, out, append(sent, pending...))
	if !strings.Contains(report, "10 row(s)") || !strings.Contains(report, "whose sent_at is NULL") {
		t.Errorf("cdc recover's report does not say it handed 10 unsent rows to the stream:\n%s", report)
	}
	n := copies(relaytest.ReadLines(t, out))
	for _, m := range sent {
		if n[m.ID] != 1 {
			t.Errorf("row %s, sent before the slot was lost, is in the file %d times, want once", m.ID, n[m.ID])
		}
	}
	var unsent int
	conn.QueryRow(ctx, "SELECT count(*) FROM "+ob.Table+" WHERE sent_at IS NULL").Scan(&unsent)
	if unsent != 0 {
		t.Errorf("%d rows still unsent after the recovered relay delivered them", unsent)
	}
}

// TestIntegrationRecoverRelaysEveryRowSinceTheLastAcknowledgedCommit: the
// default layout (no sent_at), two sinks (one takes type "u" only): the
// progress table's commit_time bounds what cdc recover relays again
// (created_at at or after the earliest sink's, less --margin), and a
// sink that got nothing new since a restart keeps its commit time. The
// slot is invalidated while the relay streams, rows are committed
// throughout; every committed row reaches each sink its route takes it
// to, duplicates allowed.
func TestIntegrationRecoverRelaysEveryRowSinceTheLastAcknowledgedCommit(t *testing.T) {
	url := lostSlotCluster(t).URL("postgres")
	ob := relaytest.NewOutbox(t, url)
	dir := t.TempDir()
	out, only := filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "u.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}\n  - {name: u, kind: file, path: %s, route: {include: [u]}}", out, only), "")
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	ctx := context.Background()
	var all, us []relaytest.Msg
	insert := func(typ string) {
		m := relaytest.NewMsg(typ, fmt.Sprint("k", len(all)%3), len(all))
		all = append(all, m)
		if typ == "u" {
			us = append(us, m)
		}
		ob.InsertTx(t, conn, m)
	}
	sinksWithTime := func() int {
		var n int
		conn.QueryRow(ctx, "SELECT count(*) FROM public.walpost_sink_progress WHERE slot = $1 AND commit_time IS NOT NULL", ob.Slot).Scan(&n)
		return n
	}
	for _, typ := range []string{"t", "u", "t", "u"} {
		insert(typ)
	}
	p := startCDC(t, "run", "--config", cfg)
	relaytest.WaitAllDelivered(t, out, all, 30*time.Second, p.Stderr.String)
	relaytest.WaitAllDelivered(t, only, us, 30*time.Second, p.Stderr.String)
	pgtest.Await(t, 30*time.Second, "both sinks' commit times in the progress table", func() bool { return sinksWithTime() == 2 })
	p.Stop(t)
	var saved time.Time
	if err := conn.QueryRow(ctx, "SELECT max(updated_at) FROM public.walpost_sink_progress WHERE slot = $1", ob.Slot).Scan(&saved); err != nil {
		t.Fatal(err)
	}
	p = startCDC(t, "run", "--config", cfg)
	insert("t")
	relaytest.WaitAllDelivered(t, out, all, 30*time.Second, p.Stderr.String)
	pgtest.Await(t, 30*time.Second, "the progress saved after the restart", func() bool {
		var n int
		conn.QueryRow(ctx, "SELECT count(*) FROM public.walpost_sink_progress WHERE slot = $1 AND updated_at > $2", ob.Slot, saved).Scan(&n)
		return n == 2 // both: the relay writes every sink's position
	})
	if n := sinksWithTime(); n != 2 {
		t.Fatalf("%d sinks with a commit time after the restart, want 2 (sink u got nothing new and keeps its own)", n)
	}
	invalidate(t, url, ob.Slot, func() { insert("u") }) // the relay streams meanwhile
	if code := p.Wait(30 * time.Second); code != 1 {
		t.Fatalf("cdc run exited %d after its slot was lost, want 1\n%s", code, p.Stderr.String())
	}
	for _, typ := range []string{"t", "u", "t", "u", "t"} {
		insert(typ)
	}
	before := len(copies(relaytest.ReadLines(t, out)))
	report := recoverAndDeliver(t, cfg, out, all)
	relaytest.WaitAllDelivered(t, only, us, 30*time.Second, nil)
	if !strings.Contains(report, "whose created_at is at or after") || !strings.Contains(report, "less --margin 5m0s") {
		t.Errorf("cdc recover's report does not give the time bound:\n%s", report)
	}
	for _, l := range relaytest.ReadLines(t, only) {
		if l.Type != "u" {
			t.Errorf("sink u got a message of type %q", l.Type)
		}
	}
	t.Logf("%d rows committed, %d delivered before the recovery; %d lines after it", len(all), before, len(relaytest.ReadLines(t, out)))
}

// TestIntegrationRecoverRefusesAUsableSlotAndAsksForABoundItCannotFind:
// cdc recover never drops a slot the server has not invalidated; on an
// invalidated slot that nothing tells the delivered rows of (no sent_at,
// no retention, no progress: no relay ever ran), it changes nothing and
// asks for --since; with --since, every row reaches the file.
func TestIntegrationRecoverRefusesAUsableSlotAndAsksForABoundItCannotFind(t *testing.T) {
	url, ob, out, cfg := lostSlotOutbox(t, "")
	conn := pgtest.Connect(t, url)
	before := relaytest.SlotConfirmed(t, conn, ob.Slot)
	code, stdout, stderr := relaytest.Run(t, os.Args[0], []string{"WALPOST_CDC_MAIN=1"}, "recover", "--config", cfg)
	if code != 1 || !strings.Contains(stderr, "never drops a usable one") || relaytest.SlotConfirmed(t, conn, ob.Slot) != before {
		t.Fatalf("recover of a usable slot: exit %d, want 1 and the slot kept\n%s%s", code, stdout, stderr)
	}
	var msgs []relaytest.Msg
	for i := range 5 {
		msgs = append(msgs, relaytest.NewMsg("t", "k", i))
	}
	ob.InsertTx(t, conn, msgs...)
	invalidate(t, url, ob.Slot, nil)
	code, stdout, stderr = relaytest.Run(t, os.Args[0], []string{"WALPOST_CDC_MAIN=1"}, "recover", "--config", cfg)
	if code != 1 || !strings.Contains(stderr, "Pass --since") || !strings.Contains(stderr, "holds 5 row(s)") || walStatus(t, conn, ob.Slot) != "lost" {
		t.Fatalf("recover with nothing recorded: exit %d, want 1 asking for --since, the slot untouched (%s)\n%s%s", code, walStatus(t, conn, ob.Slot), stdout, stderr)
	}
	t.Logf("recover with nothing recorded: %s", stderr)
	report := recoverAndDeliver(t, cfg, out, msgs, "--since", "1h")
	if !strings.Contains(report, "5 row(s)") {
		t.Errorf("cdc recover --since 1h did not hand the 5 rows to the stream:\n%s", report)
	}
}

// TestIntegrationRecoverRelaysEveryRowNewerThanTheLastConfirmedRetentionMark:
// with relay.retention and no progress table, the newest mark the old
// slot confirmed bounds what cdc recover relays again (its taken_at less
// relay.retention.margin): rows an hour older than it, delivered, are not
// sent again; every committed row reaches the file.
func TestIntegrationRecoverRelaysEveryRowNewerThanTheLastConfirmedRetentionMark(t *testing.T) {
	url, ob, out, cfg := lostSlotOutbox(t, "relay:\n  retention: {keep: 24h, margin: 1m, interval: 200ms}")
	addPostgres(t, cfg, `progress_table: "-"`)
	conn := pgtest.Connect(t, url)
	ctx := context.Background()
	var old, recent []relaytest.Msg
	for i := range 5 {
		m := relaytest.NewMsg("t", "k", i)
		old = append(old, m)
		pgtest.Exec(t, url, fmt.Sprintf("INSERT INTO %s (id, type, key, payload, created_at) VALUES ('%s', '%s', '%s', '%s', now() - interval '1 hour')",
			ob.Table, m.ID, m.Type, m.Key, m.Payload))
	}
	p := startCDC(t, "run", "--config", cfg)
	relaytest.WaitAllDelivered(t, out, old, 30*time.Second, p.Stderr.String)
	var delivered time.Time
	if err := conn.QueryRow(ctx, "SELECT now()").Scan(&delivered); err != nil {
		t.Fatal(err)
	}
	pgtest.Await(t, 30*time.Second, "a retention mark taken after the delivery, confirmed by the slot", func() bool {
		var n int
		conn.QueryRow(ctx, `SELECT count(*) FROM public.walpost_retention_marks m JOIN pg_replication_slots s ON s.slot_name = m.slot
			WHERE m.slot = $1 AND m.lsn <= s.confirmed_flush_lsn AND m.taken_at > $2`, ob.Slot, delivered).Scan(&n)
		return n > 0
	})
	p.Stop(t)
	for i := range 5 {
		m := relaytest.NewMsg("t", "k", 100+i)
		recent = append(recent, m)
		ob.InsertTx(t, conn, m)
	}
	invalidate(t, url, ob.Slot, nil)
	report := recoverAndDeliver(t, cfg, out, append(old, recent...))
	if !strings.Contains(report, "the newest retention mark the old slot confirmed") || !strings.Contains(report, "5 row(s)") {
		t.Errorf("cdc recover's report does not give the retention bound and the 5 recent rows:\n%s", report)
	}
	n := copies(relaytest.ReadLines(t, out))
	for _, m := range old {
		if n[m.ID] != 1 {
			t.Errorf("row %s, an hour older than the confirmed mark, is in the file %d times, want once", m.ID, n[m.ID])
		}
	}
	var marks int
	conn.QueryRow(ctx, "SELECT count(*) FROM public.walpost_retention_marks WHERE slot = $1 AND taken_at < $2", ob.Slot, delivered.Add(time.Minute)).Scan(&marks)
	if marks != 0 {
		t.Errorf("%d marks of the old slot kept after cdc recover; they prove nothing for the new slot", marks)
	}
}

// TestIntegrationRecoverRecreatesASlotDroppedByHand: a slot dropped by
// hand (or missing after a failover) with rows pending: cdc run stops with
// the failover explanation, which names cdc recover; cdc recover creates
// the slot and hands it the rows since the last acknowledged commit; every
// committed row reaches the file. On the way: a progress table made before
// commit_time gets it back (cdc run upgrades the table its role owns), and
// the positions carry it.
func TestIntegrationRecoverRecreatesASlotDroppedByHand(t *testing.T) {
	url, ob, out, cfg := lostSlotOutbox(t, "")
	conn := pgtest.Connect(t, url)
	ctx := context.Background()
	pgtest.Exec(t, url, "ALTER TABLE public.walpost_sink_progress DROP COLUMN commit_time")
	var all []relaytest.Msg
	insert := func() {
		m := relaytest.NewMsg("t", "k", len(all))
		all = append(all, m)
		ob.InsertTx(t, conn, m)
	}
	p := startCDC(t, "run", "--config", cfg)
	insert()
	relaytest.WaitAllDelivered(t, out, all, 30*time.Second, p.Stderr.String)
	p.Stop(t)
	cdcInit(t, cfg)
	p = startCDC(t, "run", "--config", cfg)
	insert()
	relaytest.WaitAllDelivered(t, out, all, 30*time.Second, p.Stderr.String)
	pgtest.Await(t, 30*time.Second, "the progress saved with commit_time", func() bool {
		var n int
		conn.QueryRow(ctx, "SELECT count(*) FROM public.walpost_sink_progress WHERE slot = $1 AND commit_time IS NOT NULL", ob.Slot).Scan(&n)
		return n == 1
	})
	p.Stop(t)
	for range 5 {
		insert()
	}
	pgtest.DropSlot(t, url, ob.Slot)
	p = startCDC(t, "run", "--config", cfg)
	if code := p.Wait(30 * time.Second); code != 1 || !strings.Contains(lastLine(p.Stderr.String()), "cdc recover --config "+cfg) {
		t.Fatalf("cdc run on the dropped slot exited %d, want 1 naming cdc recover\n%s", code, p.Stderr.String())
	}
	code, stdout, stderr := relaytest.Run(t, os.Args[0], []string{"WALPOST_CDC_MAIN=1"}, "recover", "--config", cfg)
	if code != 0 || !strings.Contains(stdout, "missing") {
		t.Fatalf("cdc recover exited %d\n%s%s", code, stdout, stderr)
	}
	p = startCDC(t, "run", "--config", cfg)
	relaytest.WaitAllDelivered(t, out, all, 60*time.Second, p.Stderr.String)
	p.Stop(t)
}
