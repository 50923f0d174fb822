package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/internal/tcpproxy"
)

// startCluster starts a throwaway cluster of the test's own with extra
// postgresql.conf lines, closed when the test ends.
func startCluster(t *testing.T, settings ...string) *pgtest.Cluster {
	t.Helper()
	return pgtest.StartCluster(t, pgtest.Options{Settings: settings})
}

// pollWaits returns the waits (retry_in_ms) a standby logged between its
// tries of a held slot.
func pollWaits(t *testing.T, stderr string) []time.Duration {
	t.Helper()
	var waits []time.Duration
	sc := bufio.NewScanner(strings.NewReader(stderr))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct {
			Msg     string  `json:"message"`
			RetryIn float64 `json:"retry_in_ms"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "slot still held; polling it again" {
			waits = append(waits, time.Duration(l.RetryIn*float64(time.Millisecond)))
		}
	}
	return waits
}

// TestIntegrationStandbyPollsAtTheConfiguredIntervalAndTakesOverAfterKill9:
// with postgres.standby_poll: 300ms the waiting instance tries the slot
// every 225–375 ms (jitter ±25%), and after a kill -9 of the active one it
// delivers within that poll plus a margin: well under the 10 s target.
// Nothing committed is lost.
func TestIntegrationStandbyPollsAtTheConfiguredIntervalAndTakesOverAfterKill9(t *testing.T) {
	const poll = 300 * time.Millisecond
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "relay: {batch_size: 50}")
	addPostgres(t, cfg, "standby_poll: "+poll.String())
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	prod := ob.StartProducer(t, 8, 2*time.Millisecond)
	active := startCDC(t, "run", "--config", cfg)
	if !pgtest.WaitFor(30*time.Second, func() bool { return relaytest.CountLines(out) > 100 }) {
		t.Fatalf("the first instance did not deliver\n%s", active.Stderr.String())
	}
	standby := startCDC(t, "run", "--config", cfg)
	if !pgtest.WaitFor(30*time.Second, func() bool { return len(pollWaits(t, standby.Stderr.String())) >= 5 }) {
		t.Fatalf("the standby did not poll the held slot 5 times\n%s", standby.Stderr.String())
	}
	for _, w := range pollWaits(t, standby.Stderr.String()) {
		if w < poll*3/4 || w > poll*5/4 {
			t.Errorf("the standby waited %v between tries, want %v ±25%%", w, poll)
		}
	}
	atKill := relaytest.CountLines(out)
	active.Kill9(t)
	killed := time.Now()
	if !pgtest.WaitFor(30*time.Second, func() bool { return relaytest.CountLines(out) > atKill }) {
		t.Fatalf("the standby did not deliver within 30 s of the kill\n%s", standby.Stderr.String())
	}
	takeover := time.Since(killed)
	prod.Stop()
	committed := prod.Committed(t, conn)
	pgtest.WaitFor(60*time.Second, func() bool {
		return relaytest.CountLines(out) >= len(committed) && relaytest.AllDelivered(committed, relaytest.ReadLines(t, out))
	})
	r := relaytest.CheckDelivered(t, "file", committed, relaytest.ReadLines(t, out))
	t.Logf("standby_poll %v: kill -9 of the active instance → first delivery by the standby: %v; %d committed, %d duplicates",
		poll, takeover.Round(time.Millisecond), r.Committed, r.Duplicates)
	if bound := poll*5/4 + 2*time.Second; takeover > bound {
		t.Errorf("takeover took %v, want under %v (one poll and a margin)", takeover, bound)
	}
}

// TestIntegrationNetworkCutTakeoverIsBoundedByWalSenderTimeout: the active
// instance reaches Postgres through a proxy that is frozen (no byte, FIN
// or RST passes either way: a lost network, not a dead process). The
// server keeps the slot active until its WAL sender has heard nothing for
// wal_sender_timeout; only then can the standby (on its own path to the
// server) take it. The takeover is measured and must lie between
// wal_sender_timeout minus one status interval (the relay's last status
// update before the cut) and wal_sender_timeout + one poll + a margin.
// When the network comes back, the old active instance finds the slot
// held, closes its sinks and waits as a standby. Nothing committed is
// lost. WALPOST_TEST_WAL_SENDER_TIMEOUT=60s measures PostgreSQL's default.
func TestIntegrationNetworkCutTakeoverIsBoundedByWalSenderTimeout(t *testing.T) {
	timeout, poll, status := 5*time.Second, 500*time.Millisecond, time.Second // status: ob.Config's status_interval
	if v := os.Getenv("WALPOST_TEST_WAL_SENDER_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		timeout = d
	}
	c := startCluster(t, fmt.Sprintf("wal_sender_timeout = %dms", timeout.Milliseconds()))
	url := c.URL("postgres")
	ob := relaytest.NewOutbox(t, url)
	proxy, err := tcpproxy.New(fmt.Sprintf("127.0.0.1:%d", c.Port))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	viaProxy := ob
	viaProxy.URL = strings.Replace(url, fmt.Sprintf("127.0.0.1:%d", c.Port), proxy.Addr(), 1)
	dir := t.TempDir()
	activeOut, standbyOut := filepath.Join(dir, "active.jsonl"), filepath.Join(dir, "standby.jsonl")
	activeCfg := viaProxy.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", activeOut), "relay: {batch_size: 50}")
	standbyCfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", standbyOut), "relay: {batch_size: 50}")
	addPostgres(t, standbyCfg, "standby_poll: "+poll.String())
	cdcInit(t, standbyCfg)
	conn := pgtest.Connect(t, url)
	prod := ob.StartProducer(t, 8, 5*time.Millisecond)
	active := startCDC(t, "run", "--config", activeCfg)
	if !pgtest.WaitFor(30*time.Second, func() bool { return relaytest.CountLines(activeOut) > 50 }) {
		t.Fatalf("the active instance did not deliver\n%s", active.Stderr.String())
	}
	standby := startCDC(t, "run", "--config", standbyCfg)
	if !pgtest.WaitFor(30*time.Second, func() bool { return strings.Contains(standby.Stderr.String(), "held by another process") }) {
		t.Fatalf("the standby did not wait for the slot\n%s", standby.Stderr.String())
	}
	logAtCut := len(active.Stderr.String())
	proxy.Freeze()
	cut := time.Now()
	if !pgtest.WaitFor(timeout+60*time.Second, func() bool { return relaytest.CountLines(standbyOut) > 0 }) {
		t.Fatalf("the standby did not deliver within wal_sender_timeout + 60 s of the cut\n%s", standby.Stderr.String())
	}
	takeover := time.Since(cut)
	noticed := strings.Contains(active.Stderr.String()[logAtCut:], "replication connection lost")
	t.Logf("wal_sender_timeout %v, standby_poll %v: network cut of the active instance → first delivery by the standby: %v (the active instance noticed the cut by then: %v)",
		timeout, poll, takeover.Round(time.Millisecond), noticed)
	if low, high := timeout-status-500*time.Millisecond, timeout+poll*5/4+3*time.Second; takeover < low || takeover > high {
		t.Errorf("takeover took %v, want between %v and %v (governed by wal_sender_timeout)", takeover, low, high)
	}
	proxy.Thaw()
	if !pgtest.WaitFor(30*time.Second, func() bool {
		return strings.Contains(active.Stderr.String()[logAtCut:], "sinks closed; waiting for the slot again")
	}) {
		t.Fatalf("once the network was back, the old active instance did not close its sinks and wait:\n%s", active.Stderr.String()[logAtCut:])
	}
	prod.Stop()
	committed := prod.Committed(t, conn)
	lines := func() []relaytest.Line {
		return append(relaytest.ReadLines(t, activeOut), relaytest.ReadLines(t, standbyOut)...)
	}
	pgtest.WaitFor(60*time.Second, func() bool { return relaytest.AllDelivered(committed, lines()) })
	r := relaytest.CheckDelivered(t, "file", committed, lines())
	t.Logf("%d committed, %d duplicates", r.Committed, r.Duplicates)
}

// TestIntegrationWalSenderTimeoutCanBeSetForTheRelayRoleAlone: what the
// README recommends to shorten a takeover after a network cut without
// changing the server's default: wal_sender_timeout is a per-session
// setting (PostgreSQL 12+), so ALTER ROLE … SET applies it to the relay's
// replication connections only.
func TestIntegrationWalSenderTimeoutCanBeSetForTheRelayRoleAlone(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	role := pgtest.Name(t, "r")
	pgtest.Exec(t, url, "CREATE ROLE "+role+" LOGIN REPLICATION", "ALTER ROLE "+role+" SET wal_sender_timeout = '7s'")
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP ROLE IF EXISTS "+role) })
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(strings.Replace(url, "postgres://postgres@", "postgres://"+role+"@", 1))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	repl, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer repl.Close(ctx)
	res := repl.PgConn().Exec(ctx, "SHOW wal_sender_timeout")
	results, err := res.ReadAll()
	if err != nil || len(results) != 1 || len(results[0].Rows) != 1 {
		t.Fatalf("SHOW wal_sender_timeout on a replication connection: %v %v", results, err)
	}
	if got := string(results[0].Rows[0][0]); got != "7s" {
		t.Fatalf("wal_sender_timeout on the role's replication connection: %s, want 7s", got)
	}
	var def string
	pgtest.Connect(t, url).QueryRow(ctx, "SHOW wal_sender_timeout").Scan(&def)
	if def == "7s" {
		t.Fatal("the setting leaked to other roles")
	}
}

// TestIntegrationFailoverSlotIsRefusedBeforePostgres17: with
// postgres.failover_slot: true, cdc init refuses a server older than
// PostgreSQL 17 before it creates anything, and cdc run refuses to stream
// from a slot that cannot survive a failover. (On PostgreSQL 17+ the slot
// is created with failover = true: TestIntegrationVersions runs this on
// every version, and a failover on 17 and 18.)
func TestIntegrationFailoverSlotIsRefusedBeforePostgres17(t *testing.T) {
	t.Parallel()
	failoverSlotIsRefusedBeforePostgres17(t, pgtest.URL(t))
}

// failoverSlotIsRefusedBeforePostgres17 is
// TestIntegrationFailoverSlotIsRefusedBeforePostgres17 on the database at
// url (also TestIntegrationVersions).
func failoverSlotIsRefusedBeforePostgres17(t *testing.T, url string) {
	conn := pgtest.Connect(t, url)
	ctx := context.Background()
	var version int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		t.Fatal(err)
	}
	ob := relaytest.NewOutbox(t, url)
	cfg := ob.Config(t, "  - {name: out, kind: stdout}", "")
	addPostgres(t, cfg, "failover_slot: true")
	exists := func(q, name string) bool {
		var n int
		if err := conn.QueryRow(ctx, q, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	const slotQ, pubQ = "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", "SELECT count(*) FROM pg_publication WHERE pubname = $1"
	p := startCDC(t, "init", "--config", cfg)
	code := p.Wait(60 * time.Second)
	if version >= 170000 {
		var failover bool
		if code != 0 || conn.QueryRow(ctx, "SELECT failover FROM pg_replication_slots WHERE slot_name = $1", ob.Slot).Scan(&failover) != nil || !failover {
			t.Fatalf("PostgreSQL %d: cdc init exited %d, failover %v\n%s", version, code, failover, p.Stderr.String())
		}
		return
	}
	plainError(t, "init", p.Stderr.String(), "failover slots need PostgreSQL 17 or later: postgres.failover_slot is true but this server is PostgreSQL")
	if code != 1 || exists(slotQ, ob.Slot) || exists(pubQ, ob.Publication) {
		t.Fatalf("cdc init exited %d; slot created %v, publication created %v (want 1, nothing created)", code, exists(slotQ, ob.Slot), exists(pubQ, ob.Publication))
	}
	// A slot made without failover_slot, then the key turned on: cdc run
	// refuses it rather than stream from a slot the standbys do not have.
	plain := ob.Config(t, "  - {name: out, kind: stdout}", "")
	cdcInit(t, plain)
	p = startCDC(t, "run", "--config", cfg)
	if code := p.Wait(60 * time.Second); code != 1 || !strings.Contains(p.Stderr.String(), "failover slots need PostgreSQL 17 or later") {
		t.Fatalf("cdc run with failover_slot on PostgreSQL %d exited %d:\n%s", version, code, p.Stderr.String())
	}
}

// TestIntegrationPromotedReplicaWithoutTheSlotStopsWithTheExplanation: the
// relay streams from a primary whose physical replica (pg_basebackup: no
// slots) is in postgres.url as the second host (target_session_attrs=
// read-write). The primary stops, the replica is promoted, the relay
// reconnects to it and finds no slot there: it stops (exit 1) explaining
// the failover, what may be lost and what to do, and creates no slot. A
// relay started afterwards on the promoted server (it never streamed in
// that process) tells the same from what the server holds: the progress
// table's positions of the slot and timeline 2.
func TestIntegrationPromotedReplicaWithoutTheSlotStopsWithTheExplanation(t *testing.T) {
	t.Parallel()
	primary := startCluster(t)
	replica, err := primary.StartReplica()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { replica.Close() })
	ob := relaytest.NewOutbox(t, primary.URL("postgres"))
	both := ob
	both.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write", primary.Port, replica.Port)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := both.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "")
	addPostgres(t, cfg, "reconnect_backoff: 1s")
	cdcInit(t, cfg)
	ctx := context.Background()
	conn := pgtest.Connect(t, primary.URL("postgres"))
	p := startCDC(t, "run", "--config", cfg)
	first := relaytest.NewMsg("t", "k", 1)
	ob.InsertTx(t, conn, first)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{first}, 30*time.Second, p.Stderr.String)
	onReplica := pgtest.Connect(t, replica.URL("postgres"))
	count := func(q string, args ...any) int {
		var n int
		if err := onReplica.QueryRow(ctx, q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if !pgtest.WaitFor(30*time.Second, func() bool {
		return count("SELECT count(*) FROM public.walpost_sink_progress WHERE slot = $1", ob.Slot) > 0
	}) {
		t.Fatal("the sink's progress did not reach the replica")
	}
	if err := primary.Stop("fast"); err != nil {
		t.Fatal(err)
	}
	if err := replica.Promote(); err != nil {
		t.Fatal(err)
	}
	const slotQ = "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1"
	server := fmt.Sprintf("does not exist on the server at 127.0.0.1:%d", replica.Port)
	wants := []string{server, "failover to a server the slot was not synchronized to", "walpost never creates a slot by itself",
		"cdc init --config " + cfg, "cdc replay --config " + cfg, "postgres.failover_slot: true"}
	check := func(p *proc, evidence ...string) {
		t.Helper()
		if code := p.Wait(90 * time.Second); code != 1 {
			t.Fatalf("cdc run exited %d, want 1:\n%s", code, p.Stderr.String())
		}
		for _, w := range append(wants, evidence...) {
			if !strings.Contains(p.Stderr.String(), w) {
				t.Errorf("cdc run's error lacks %q:\n%s", w, p.Stderr.String())
			}
		}
		if n := count(slotQ, ob.Slot); n != 0 {
			t.Fatalf("a slot was created on the promoted server")
		}
	}
	check(p, "this process was streaming from it until its connection was lost")
	t.Logf("the relay that streamed:\n%s", lastLine(p.Stderr.String()))
	again := startCDC(t, "run", "--config", cfg)
	check(again, "walpost_sink_progress records what sinks acknowledged from it (out at ", "this server is on timeline 2")
	if strings.Contains(again.Stderr.String(), "this process was streaming") {
		t.Errorf("a new process claims it streamed:\n%s", again.Stderr.String())
	}
}

// lastLine returns s's last non-empty line.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestIntegrationRunNeverCreatesTheSlot: cdc run on a database whose slot
// is missing stops (exit 1) and creates nothing. Where nothing says a
// relay ever streamed from it, it only asks for cdc init; once the
// progress table holds the slot's positions (a relay streamed, then the
// slot was dropped), it explains that messages may be lost and how to
// re-send them.
func TestIntegrationRunNeverCreatesTheSlot(t *testing.T) {
	t.Parallel()
	url, ob, out, cfg := fileOutbox(t, "")
	conn := pgtest.Connect(t, url)
	ctx := context.Background()
	slotCount := func() int {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", ob.Slot).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	pgtest.DropSlot(t, url, ob.Slot)
	p := startCDC(t, "run", "--config", cfg)
	if code := p.Wait(60 * time.Second); code != 1 || !strings.Contains(p.Stderr.String(), "run 'cdc init'") ||
		strings.Contains(p.Stderr.String(), "failover") || slotCount() != 0 {
		t.Fatalf("never streamed: cdc run exited %d, slots %d:\n%s", code, slotCount(), p.Stderr.String())
	}
	cdcInit(t, cfg)
	p = startCDC(t, "run", "--config", cfg)
	first := relaytest.NewMsg("t", "k", 1)
	ob.InsertTx(t, conn, first)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{first}, 30*time.Second, p.Stderr.String)
	if !pgtest.WaitFor(30*time.Second, func() bool {
		var n int
		conn.QueryRow(ctx, "SELECT count(*) FROM public.walpost_sink_progress WHERE slot = $1", ob.Slot).Scan(&n)
		return n > 0
	}) {
		t.Fatal("no sink progress saved")
	}
	p.Cmd.Process.Signal(os.Interrupt)
	if code := p.Wait(60 * time.Second); code != 0 {
		t.Fatalf("cdc run exited %d on SIGINT", code)
	}
	pgtest.DropSlot(t, url, ob.Slot)
	p = startCDC(t, "run", "--config", cfg)
	if code := p.Wait(60 * time.Second); code != 1 || !strings.Contains(p.Stderr.String(), "walpost never creates a slot by itself") ||
		!strings.Contains(p.Stderr.String(), "records what sinks acknowledged from it") || slotCount() != 0 {
		t.Fatalf("after streaming: cdc run exited %d, slots %d:\n%s", code, slotCount(), p.Stderr.String())
	}
}

// TestIntegrationMessagesOutboxMissingSlotSaysNothingCanBeReplayed: a
// table-less outbox whose slot is gone after it relayed (the progress
// table remembers it) stops cdc run with the missing-slot explanation, and
// its advice for what the sinks missed is no cdc replay (there is no
// table): only the application can emit those messages again.
func TestIntegrationMessagesOutboxMissingSlotSaysNothingCanBeReplayed(t *testing.T) {
	t.Parallel()
	url, mo, out, cfg := messagesOutbox(t, "", "")
	cdcInit(t, cfg)
	p := startCDC(t, "run", "--config", cfg)
	first := relaytest.NewMsg("t", "k", 1)
	mo.EmitTx(t, pgtest.Connect(t, url), first)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{first}, 30*time.Second, p.Stderr.String)
	p.Stop(t)
	pgtest.DropSlot(t, url, mo.Slot)
	again := startCDC(t, "run", "--config", cfg)
	if code := again.Wait(60 * time.Second); code != 1 {
		t.Fatalf("cdc run without its slot exited %d, want 1:\n%s", code, again.Stderr.String())
	}
	msg := again.Stderr.String()
	for _, w := range []string{"records what sinks acknowledged from it (out at ", "cdc init --config " + cfg,
		"a table-less outbox (postgres.source: messages) keeps no rows to replay", "emitted again by the application"} {
		if !strings.Contains(msg, w) {
			t.Errorf("cdc run's error lacks %q:\n%s", w, msg)
		}
	}
	if strings.Contains(msg, "cdc replay") || strings.Contains(msg, "from the outbox table") {
		t.Errorf("cdc run's error sends a table-less outbox to cdc replay:\n%s", msg)
	}
}

// slotPositions reads the confirmed_flush_lsn of slots on conn; with
// synced, only of the slots a standby synchronized and persisted
// (pg_replication_slots.synced and not temporary: usable after a
// promotion).
func slotPositions(ctx context.Context, conn *pgx.Conn, synced bool, slots ...string) (map[string]pglogrepl.LSN, error) {
	q := "SELECT slot_name::text, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = ANY($1) AND confirmed_flush_lsn IS NOT NULL"
	if synced {
		q += " AND synced AND NOT temporary"
	}
	rows, err := conn.Query(ctx, q, slots)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]pglogrepl.LSN{}
	for rows.Next() {
		var name, lsn string
		if err := rows.Scan(&name, &lsn); err != nil {
			return nil, err
		}
		if out[name], err = pglogrepl.ParseLSN(lsn); err != nil {
			return nil, err
		}
	}
	return out, rows.Err()
}

// failoverToASynchronizedStandby: PostgreSQL v (17+) fails over to a
// physical standby that synchronizes failover slots (sync_replication_slots
// = on, hot_standby_feedback, primary_slot_name, a dbname in
// primary_conninfo; on the primary synchronized_standby_slots names the
// standby's physical slot). Two outboxes with postgres.failover_slot: true
// are relayed under load, through a postgres.url naming both servers with
// target_session_attrs=read-write, the producers writing through it too.
// Once the standby holds both slots (synced, persisted), the relay of the
// second outbox is killed (kill -9, as if its host went down with the
// primary) and the primary is stopped in immediate mode; the standby is
// promoted. The first relay follows to the promoted server by itself; the
// second is started again, onto it. Nothing the promoted server holds is
// missing from either sink, and nothing it lacks was delivered (the
// primary sent the relays only what the standby had: synchronized_standby_slots).
// It measures how far the standby's copy of the restarted relay's slot
// trailed the primary's at the kill (bytes, and how long before the kill
// the primary's slot was where the standby's was), and the duplicates of
// each relay: the re-send window of docs/operations.md, "Failover".
func failoverToASynchronizedStandby(t *testing.T, v int) {
	primary := pgtest.StartCluster(t, pgtest.Options{Version: v})
	dir := t.TempDir()
	type relay struct {
		ob       relaytest.Outbox
		out, cfg string
		p        *proc
		prod     *relaytest.Producer
	}
	sinks := func(name string) string {
		return fmt.Sprintf("  - {name: out, kind: file, path: %s}", filepath.Join(dir, name+".jsonl"))
	}
	// The slots first: a standby's slot sync worker that found nothing to
	// synchronize naps longer and longer (up to 30 s), and would keep the
	// test waiting for the first copies.
	var relays []*relay
	for _, name := range []string{"follows", "restarted"} {
		r := &relay{ob: relaytest.NewOutbox(t, primary.URL("postgres")), out: filepath.Join(dir, name+".jsonl")}
		cfg := r.ob.Config(t, sinks(name), "")
		addPostgres(t, cfg, "failover_slot: true")
		cdcInit(t, cfg)
		relays = append(relays, r)
	}
	follows, restarted := relays[0], relays[1]
	standby, err := primary.StartReplicaWith(pgtest.ReplicaOptions{Slot: true, DBName: "postgres",
		Settings: []string{"sync_replication_slots = on", "hot_standby_feedback = on"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { standby.Close() })
	standbyUp := time.Now()
	pgtest.Exec(t, primary.URL("postgres"), fmt.Sprintf("ALTER SYSTEM SET synchronized_standby_slots = '%s'", standby.PrimarySlot), "SELECT pg_reload_conf()")
	both := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write", primary.Port, standby.Port)
	for i, r := range relays {
		r.ob.URL = both
		r.cfg = r.ob.Config(t, sinks([]string{"follows", "restarted"}[i]), "relay: {batch_size: 50}")
		addPostgres(t, r.cfg, "failover_slot: true", "reconnect_backoff: 1s")
		r.p = startCDC(t, "run", "--config", r.cfg)
		r.prod = r.ob.StartProducer(t, 4, 10*time.Millisecond)
	}
	slots := []string{follows.ob.Slot, restarted.ob.Slot}
	ctx := context.Background()
	onPrimary, onStandby := pgtest.Connect(t, primary.URL("postgres")), pgtest.Connect(t, standby.URL("postgres"))
	for _, r := range relays {
		if !pgtest.WaitFor(60*time.Second, func() bool { return relaytest.CountLines(r.out) > 100 }) {
			t.Fatalf("the relay did not deliver\n%s", r.p.Stderr.String())
		}
	}
	// The standby's copies: synchronized, persisted, and past where they
	// were first seen (the slot sync worker keeps them moving). A copy is
	// persisted once the primary's slot has moved past where the standby
	// began, which waits for a running-transactions record (the primary
	// writes one every 15 s); pg_log_standby_snapshot writes one now.
	var first map[string]pglogrepl.LSN
	snapshot := time.Now()
	pgtest.Await(t, 90*time.Second, "the standby's synchronized copies of both slots", func() bool {
		if time.Since(snapshot) > 500*time.Millisecond {
			onPrimary.Exec(ctx, "SELECT pg_log_standby_snapshot()")
			snapshot = time.Now()
		}
		first, err = slotPositions(ctx, onStandby, true, slots...)
		return err == nil && len(first) == 2
	})
	synced := time.Now()
	pgtest.Await(t, 60*time.Second, "the standby's copies to move on", func() bool {
		now, err := slotPositions(ctx, onStandby, true, slots...)
		return err == nil && now[slots[0]] > first[slots[0]] && now[slots[1]] > first[slots[1]]
	})
	// Samples of the restarted relay's slot on both servers: under load
	// for 3 s with the slot sync worker at work, then for pause with it
	// stopped (sync_replication_slots = off, reloaded): the standby's copy
	// stays where it was, as it does while the worker naps (up to 30 s
	// when nothing changed for a while), and the primary's slot moves on.
	type sample struct {
		at               time.Time
		primary, standby pglogrepl.LSN
	}
	var samples []sample
	sampleFor := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			p, err1 := slotPositions(ctx, onPrimary, false, restarted.ob.Slot)
			s, err2 := slotPositions(ctx, onStandby, true, restarted.ob.Slot)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			samples = append(samples, sample{time.Now(), p[restarted.ob.Slot], s[restarted.ob.Slot]})
		}
	}
	// trailing returns how far the standby's copy trailed at sample i: in
	// bytes, and how long before the primary's slot was where it was.
	trailing := func(i int) (uint64, time.Duration) {
		s := samples[i]
		for _, p := range samples[:i+1] {
			if p.primary >= s.standby {
				return uint64(s.primary - min(s.primary, s.standby)), s.at.Sub(p.at)
			}
		}
		return uint64(s.primary - min(s.primary, s.standby)), s.at.Sub(samples[0].at)
	}
	sampleFor(3 * time.Second)
	var maxBytes uint64
	var maxTime time.Duration
	for i := range samples {
		b, d := trailing(i)
		maxBytes, maxTime = max(maxBytes, b), max(maxTime, d)
	}
	const pause = 5 * time.Second
	pgtest.Exec(t, standby.URL("postgres"), "ALTER SYSTEM SET sync_replication_slots = off", "SELECT pg_reload_conf()")
	sampleFor(pause)

	restarted.p.Kill9(t)
	atKill, err := slotPositions(ctx, onPrimary, false, restarted.ob.Slot)
	if err != nil {
		t.Fatal(err)
	}
	samples = append(samples, sample{at: time.Now(), primary: atKill[restarted.ob.Slot]})
	if err := primary.Stop("immediate"); err != nil {
		t.Fatal(err)
	}
	copies, err := slotPositions(ctx, onStandby, true, slots...)
	if err != nil || len(copies) != 2 {
		t.Fatalf("the standby's copies of the slots at the kill: %v %v", copies, err)
	}
	samples[len(samples)-1].standby = copies[restarted.ob.Slot]
	windowBytes, windowTime := trailing(len(samples) - 1)
	windowMsgs := 0
	for _, l := range relaytest.ReadLines(t, restarted.out) {
		if c := relaytest.ParseLSN(t, l.CommitLSN); c > copies[restarted.ob.Slot] && c <= atKill[restarted.ob.Slot] {
			windowMsgs++
		}
	}
	if err := standby.Promote(); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	// A message committed on the promoted server, for each relay.
	marks := []relaytest.Msg{relaytest.NewMsg("promoted", "k", 0), relaytest.NewMsg("promoted", "k", 1)}
	for i, r := range relays {
		r.ob.InsertTx(t, onStandby, marks[i])
	}
	relaytest.WaitAllDelivered(t, follows.out, marks[:1], 90*time.Second, follows.p.Stderr.String)
	followed := time.Since(promoted)
	restarted.p = startCDC(t, "run", "--config", restarted.cfg)
	relaytest.WaitAllDelivered(t, restarted.out, marks[1:], 60*time.Second, restarted.p.Stderr.String)
	for _, r := range []*relay{follows, restarted} {
		r.prod.Stop()
	}
	var reports []relaytest.DeliveryReport
	for _, r := range []*relay{follows, restarted} {
		committed := r.prod.Committed(t, onStandby)
		if !pgtest.WaitFor(60*time.Second, func() bool { return relaytest.AllDelivered(committed, relaytest.ReadLines(t, r.out)) }) {
			t.Logf("not all delivered within 60 s\n%s", r.p.Stderr.String())
		}
		reports = append(reports, relaytest.CheckDelivered(t, "file", committed, relaytest.ReadLines(t, r.out)))
		r.p.Stop(t)
	}
	t.Logf("PostgreSQL %d failover: the standby had synchronized copies of the slots %v after it started (pg_log_standby_snapshot every 0.5 s); under load the copy trailed the primary's slot by up to %d bytes, %v",
		v, synced.Sub(standbyUp).Round(time.Millisecond), maxBytes, maxTime.Round(time.Millisecond))
	t.Logf("at the kill (slot sync stopped %v before) the copy trailed by %d bytes, %v, %d messages the relay had delivered; restarted onto the promoted server, it delivered %d committed messages with %d duplicates",
		pause, windowBytes, windowTime.Round(time.Millisecond), windowMsgs, reports[1].Committed, reports[1].Duplicates)
	t.Logf("the relay that followed through the multi-host URL delivered a message committed on the promoted server %v after the promotion: %d committed, %d duplicates",
		followed.Round(time.Millisecond), reports[0].Committed, reports[0].Duplicates)
	if windowTime < pause/2 || windowMsgs == 0 {
		t.Errorf("the standby's copy trailed by %v, %d messages: the test did not open the window it measures", windowTime, windowMsgs)
	}
}
