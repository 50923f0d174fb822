package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// Decoding from a standby (docs/operations.md, "Decoding from a
// standby"): postgres.url a physical standby of PostgreSQL 16+,
// postgres.primary_url its primary. Each test starts a primary and a
// standby of its own, per version of standbyVersions.

// standbyVersions are the versions the standby tests run on: 16 and 18,
// or those WALPOST_TEST_STANDBY_VERSIONS lists (e.g. 16,17,18).
func standbyVersions(t *testing.T) []int {
	t.Helper()
	v := os.Getenv("WALPOST_TEST_STANDBY_VERSIONS")
	if v == "" {
		return []int{16, 18}
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("WALPOST_TEST_STANDBY_VERSIONS=%s: %v", v, err)
		}
		out = append(out, n)
	}
	return out
}

// standbySetup is a primary, its standby (hot_standby_feedback on), an
// outbox on the primary and a config whose url is the standby and
// primary_url the primary, with a file sink.
type standbySetup struct {
	primary, standby *pgtest.Cluster
	ob               relaytest.Outbox // its URL is the primary's
	out, cfg         string
}

func newStandbySetup(t *testing.T, version int, standbySettings ...string) *standbySetup {
	t.Helper()
	return newStandbySetupWith(t, version, "relay: {batch_size: 50}", standbySettings...)
}

// newStandbySetupWith is newStandbySetup with extra top-level YAML.
func newStandbySetupWith(t *testing.T, version int, extra string, standbySettings ...string) *standbySetup {
	t.Helper()
	p := pgtest.StartCluster(t, pgtest.Options{Version: version})
	s := pgtest.StandbyOf(t, p, standbySettings...)
	ob := relaytest.NewOutbox(t, p.URL("postgres"))
	onStandby := ob
	onStandby.URL = s.URL("postgres")
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := onStandby.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), extra)
	addPostgres(t, cfg, "primary_url: "+p.URL("postgres"), "heartbeat_interval: 1s")
	return &standbySetup{primary: p, standby: s, ob: ob, out: out, cfg: cfg}
}

// slotOn reports whether the server at url has the setup's slot.
func (ss *standbySetup) slotOn(t *testing.T, url string) bool {
	t.Helper()
	var n int
	if err := pgtest.Connect(t, url).QueryRow(context.Background(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", ss.ob.Slot).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// msgs returns n new messages of type typ.
func standbyMsgs(typ string, n int) []relaytest.Msg {
	out := make([]relaytest.Msg, n)
	for i := range out {
		out[i] = relaytest.NewMsg(typ, fmt.Sprint(i%3), i)
	}
	return out
}

// TestIntegrationStandbyDecodingLosesNothingThroughKill9AndAStandbyRestart
// (and a primary restart):
// cdc init with url = a standby makes the slot there (none on the
// primary) and the state tables on the primary; cdc run reads the slot on
// the standby and delivers what commits on the primary, and through a
// kill -9 of the relay and an immediate restart of the standby every
// committed message is delivered, in order per key, and so through an
// immediate restart of the primary; cdc status shows the topology; the
// sink's progress is on the primary.
func TestIntegrationStandbyDecodingLosesNothingThroughKill9AndAStandbyRestart(t *testing.T) {
	for _, v := range standbyVersions(t) {
		t.Run(fmt.Sprintf("pg%d", v), func(t *testing.T) {
			t.Parallel()
			ss := newStandbySetup(t, v, "hot_standby_feedback = on")
			code, stdout, stderr := cdc(t, nil, "init", "--config", ss.cfg)
			if code != 0 || !strings.Contains(stdout, "on the standby") {
				t.Fatalf("cdc init exited %d:\n%s%s", code, stdout, stderr)
			}
			if !ss.slotOn(t, ss.standby.URL("postgres")) || ss.slotOn(t, ss.primary.URL("postgres")) {
				t.Fatalf("the slot is not on the standby alone (standby %v, primary %v)", ss.slotOn(t, ss.standby.URL("postgres")), ss.slotOn(t, ss.primary.URL("postgres")))
			}
			primary := pgtest.Connect(t, ss.primary.URL("postgres"))
			prod := ss.ob.StartProducer(t, 4, 5*time.Millisecond)
			r := startCDC(t, "run", "--config", ss.cfg)
			lines := relaytest.NewLineCounter(ss.out)
			grows := func(what string, p *proc) {
				t.Helper()
				n := lines.Count()
				if !pgtest.WaitFor(60*time.Second, func() bool { return lines.Count() > n+20 }) {
					t.Fatalf("nothing delivered %s (%d lines)\n%s", what, lines.Count(), p.Logs())
				}
			}
			grows("at first", r)
			r.Kill9(t)
			r = startCDC(t, "run", "--config", ss.cfg)
			grows("after kill -9 and a restart of the relay", r)
			if err := ss.standby.Restart("immediate"); err != nil {
				t.Fatal(err)
			}
			restarted := time.Now()
			grows("after an immediate restart of the standby", r)
			t.Logf("PostgreSQL %d: the standby restarted; deliveries again %v later", v, time.Since(restarted).Round(time.Millisecond))
			if err := ss.primary.Restart("immediate"); err != nil {
				t.Fatal(err)
			}
			restarted = time.Now()
			primary = pgtest.Connect(t, ss.primary.URL("postgres"))
			grows("after an immediate restart of the primary", r)
			t.Logf("PostgreSQL %d: the primary restarted; deliveries again %v later", v, time.Since(restarted).Round(time.Millisecond))
			prod.Stop()
			committed := prod.Committed(t, primary)
			pgtest.WaitFor(90*time.Second, func() bool { return relaytest.AllDelivered(committed, relaytest.ReadLines(t, ss.out)) })
			rep := relaytest.CheckDelivered(t, "file", committed, relaytest.ReadLines(t, ss.out))
			t.Logf("PostgreSQL %d: %d committed, %d delivered, %d duplicates, 0 lost", v, rep.Committed, rep.Delivered, rep.Duplicates)
			code, stdout, stderr = cdc(t, nil, "status", "--config", ss.cfg)
			if code != 0 || !strings.Contains(stdout, "topology:      standby") || !strings.Contains(stdout, "hot_standby_feedback on") {
				t.Errorf("cdc status exited %d, want 0 and the topology:\n%s%s", code, stdout, stderr)
			}
			var saved int
			if err := primary.QueryRow(context.Background(), "SELECT count(*) FROM public.walpost_sink_progress").Scan(&saved); err != nil || saved == 0 {
				t.Errorf("the primary's progress table: %d rows, %v", saved, err)
			}
			r.Stop(t)
		})
	}
}

// TestIntegrationStandbyDecodingConflictIsALostSlotThatCdcRecoverRecovers:
// a recovery conflict on the standby (hot_standby_feedback off, catalog
// rows vacuumed on the primary) invalidates the slot (rows_removed on
// 17+, conflicting on 16); the running relay exits 1 saying so, with the
// way out (cdc recover) and hot_standby_feedback; cdc status exits 1;
// cdc recover (hot_standby_feedback still off: it warns) replaces the
// slot on the standby and hands it the rows not proven delivered from
// the primary: every message committed before, during and after is
// delivered.
func TestIntegrationStandbyDecodingConflictIsALostSlotThatCdcRecoverRecovers(t *testing.T) {
	for _, v := range standbyVersions(t) {
		t.Run(fmt.Sprintf("pg%d", v), func(t *testing.T) {
			t.Parallel()
			ss := newStandbySetup(t, v, "hot_standby_feedback = on")
			cdcInit(t, ss.cfg)
			primary := pgtest.Connect(t, ss.primary.URL("postgres"))
			before, lost, after := standbyMsgs("before", 20), standbyMsgs("while_lost", 20), standbyMsgs("after", 20)
			r := startCDC(t, "run", "--config", ss.cfg)
			ss.ob.InsertTx(t, primary, before...)
			relaytest.WaitAllDelivered(t, ss.out, before, 60*time.Second, r.Logs)
			if err := pgtest.StandbyConflict(ss.primary, ss.standby, ss.ob.Slot, 90*time.Second); err != nil {
				t.Fatal(err)
			}
			invalidated := time.Now()
			code := r.Wait(30 * time.Second)
			last := lastLine(r.Stderr.String())
			t.Logf("PostgreSQL %d: the conflict invalidated the slot; cdc run exited %d %v later: %s", v, code, time.Since(invalidated).Round(time.Millisecond), last)
			reason := "conflicting"
			if v >= 17 {
				reason = "rows_removed"
			}
			for _, want := range []string{"was invalidated by the server", reason, "cdc recover --config " + ss.cfg, "hot_standby_feedback"} {
				if !strings.Contains(last, want) {
					t.Errorf("cdc run's error does not say %q", want)
				}
			}
			if code != 1 {
				t.Fatalf("cdc run exited %d, want 1\n%s", code, r.Logs())
			}
			ss.ob.InsertTx(t, primary, lost...)
			// Started on the invalidated slot, cdc run says the same.
			if code, _, stderr := cdc(t, nil, "run", "--config", ss.cfg); code != 1 || !strings.Contains(lastLine(stderr), "cdc recover --config "+ss.cfg) {
				t.Errorf("cdc run started on the invalidated slot exited %d, want 1 naming cdc recover:\n%s", code, lastLine(stderr))
			}
			if code, stdout, _ := cdc(t, nil, "status", "--config", ss.cfg); code != 1 || !strings.Contains(stdout, "invalidated") {
				t.Errorf("cdc status on the lost slot exited %d, want 1:\n%s", code, stdout)
			}
			// hot_standby_feedback still off: recover warns and goes on.
			code, stdout, stderr := cdc(t, nil, "recover", "--config", ss.cfg)
			if code != 0 || !strings.Contains(stdout, "dropped") || !strings.Contains(stdout, "created") ||
				!strings.Contains(stdout, "warning: hot_standby_feedback is off") {
				t.Fatalf("cdc recover exited %d, want 0 with a warning about hot_standby_feedback:\n%s%s", code, stdout, stderr)
			}
			if err := ss.standby.Configure("hot_standby_feedback = on"); err != nil {
				t.Fatal(err)
			}
			t.Logf("PostgreSQL %d: cdc recover: %s", v, strings.ReplaceAll(strings.TrimSpace(stdout), "\n", " | "))
			r = startCDC(t, "run", "--config", ss.cfg)
			ss.ob.InsertTx(t, primary, after...)
			all := append(append(append([]relaytest.Msg{}, before...), lost...), after...)
			got := relaytest.WaitAllDelivered(t, ss.out, all, 60*time.Second, r.Logs)
			t.Logf("PostgreSQL %d: %d messages committed around the conflict, %d lines delivered (%d duplicates), 0 lost", v, len(all), len(got), len(got)-len(all))
			r.Stop(t)
		})
	}
}

// TestIntegrationStandbyDecodingStreamsOnFromThePromotedStandby: a
// failover: the primary stops (immediate) and the standby is promoted.
// The slot survives the promotion (PostgreSQL 16+): the running relay
// notices the promotion, starts a new cycle and streams on from the same
// slot, writing its state on the promoted server, with postgres.primary_url
// unchanged (a warning says to remove it); after a kill -9 it starts again
// on the same config, the old primary still down. cdc status says
// "promoted". Every message, before and after, is delivered.
func TestIntegrationStandbyDecodingStreamsOnFromThePromotedStandby(t *testing.T) {
	for _, v := range standbyVersions(t) {
		t.Run(fmt.Sprintf("pg%d", v), func(t *testing.T) {
			t.Parallel()
			ss := newStandbySetup(t, v, "hot_standby_feedback = on")
			cdcInit(t, ss.cfg)
			primary := pgtest.Connect(t, ss.primary.URL("postgres"))
			before, during, after := standbyMsgs("before", 20), standbyMsgs("during", 20), standbyMsgs("after", 20)
			r := startCDC(t, "run", "--config", ss.cfg)
			ss.ob.InsertTx(t, primary, before...)
			relaytest.WaitAllDelivered(t, ss.out, before, 60*time.Second, r.Logs)
			if err := pgtest.WaitReplayed(ss.primary, ss.standby, time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := ss.primary.Stop("immediate"); err != nil {
				t.Fatal(err)
			}
			if err := ss.standby.Promote(); err != nil {
				t.Fatal(err)
			}
			promoted := time.Now()
			newPrimary := pgtest.Connect(t, ss.standby.URL("postgres"))
			var atPromotion string
			if err := newPrimary.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&atPromotion); err != nil {
				t.Fatal(err)
			}
			ss.ob.InsertTx(t, newPrimary, during...)
			relaytest.WaitAllDelivered(t, ss.out, append(append([]relaytest.Msg{}, before...), during...), 60*time.Second, r.Logs)
			t.Logf("PostgreSQL %d: promoted; the running relay delivered what committed on the promoted server %v later", v, time.Since(promoted).Round(time.Millisecond))
			// Within a poll of the promotion, a new cycle: state on the
			// promoted server, and the warning.
			pgtest.Await(t, 30*time.Second, "the relay's warning to remove postgres.primary_url", func() bool {
				return strings.Contains(r.Stderr.String(), "remove postgres.primary_url")
			})
			if r.Exited() {
				t.Fatalf("the relay exited after the promotion\n%s", r.Logs())
			}
			r.Kill9(t)
			r = startCDC(t, "run", "--config", ss.cfg)
			ss.ob.InsertTx(t, newPrimary, after...)
			all := append(append(append([]relaytest.Msg{}, before...), during...), after...)
			got := relaytest.WaitAllDelivered(t, ss.out, all, 60*time.Second, r.Logs)
			t.Logf("PostgreSQL %d: restarted on the same config, the old primary down: %d lines for %d messages, 0 lost", v, len(got), len(all))
			code, stdout, stderr := cdc(t, nil, "status", "--config", ss.cfg)
			if code != 0 || !strings.Contains(stdout, "topology:      promoted") {
				t.Errorf("cdc status exited %d, want 0 and topology promoted:\n%s%s", code, stdout, stderr)
			}
			r.Stop(t)
			var saved bool
			if err := newPrimary.QueryRow(context.Background(), "SELECT COALESCE(max(commit_lsn) > $1::pg_lsn, false) FROM public.walpost_sink_progress",
				atPromotion).Scan(&saved); err != nil || !saved {
				t.Errorf("the promoted server's progress table holds no position after the promotion (%s): %v", atPromotion, err)
			}
		})
	}
}

// TestIntegrationStandbyDecodingRefusesWhatCannotWork: with the slot on
// a standby, cdc init and cdc run refuse, saying what to fix, and create
// nothing: url a standby without primary_url (exit 1); url the primary
// and primary_url its standby (exit 1, swap them); primary_url the same
// server as url by another spelling (exit 1); primary_url written as
// url, failover_slot with primary_url, cdc init --adopt with primary_url
// (exit 2: the configuration); a standby of PostgreSQL 15 (exit 1, 16 or
// later). hot_standby_feedback off is a warning of cdc init, status and
// run, which go on; a standby promoted beside its running primary is
// followed (cdc status: promoted).
func TestIntegrationStandbyDecodingRefusesWhatCannotWork(t *testing.T) {
	t.Parallel()
	v := standbyVersions(t)[0]
	ss := newStandbySetup(t, v) // hot_standby_feedback off: the default
	pURL, sURL := ss.primary.URL("postgres"), ss.standby.URL("postgres")
	withPostgres := func(url string, settings ...string) string {
		t.Helper()
		onURL := ss.ob
		onURL.URL = url
		cfg := onURL.Config(t, "  - {name: out, kind: stdout}", "")
		if len(settings) > 0 {
			addPostgres(t, cfg, settings...)
		}
		return cfg
	}
	both := []string{"init", "run"}
	refused := func(name string, cmds []string, want int, says []string, cfg string, extra ...string) {
		t.Helper()
		for _, cmd := range cmds {
			args := append([]string{cmd, "--config", cfg}, extra...)
			code, stdout, stderr := cdc(t, nil, args...)
			if code != want {
				t.Errorf("%s: cdc %s exited %d, want %d\n%s%s", name, cmd, code, want, stdout, stderr)
				continue
			}
			for _, s := range says {
				if !strings.Contains(stderr, s) {
					t.Errorf("%s: cdc %s does not say %q:\n%s", name, cmd, s, lastLine(stderr))
				}
			}
			t.Logf("%s: cdc %s exits %d: %s", name, cmd, code, lastLine(stderr))
		}
	}
	refused("url a standby, no primary_url", both, 1, []string{"standby", "postgres.primary_url"}, withPostgres(sURL))
	refused("url and primary_url swapped", both, 1, []string{"swap them"}, withPostgres(pURL, "primary_url: "+sURL))
	kv := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", ss.primary.Port)
	refused("primary_url the same server", both, 1, []string{"same server", "remove it"}, withPostgres(pURL, "primary_url: '"+kv+"'"))
	refused("primary_url written as url", both, 2, []string{"postgres.primary_url", "the same as postgres.url"}, withPostgres(pURL, "primary_url: "+pURL))
	refused("failover_slot with primary_url", both, 2, []string{"postgres.failover_slot", "standby"}, withPostgres(sURL, "primary_url: "+pURL, "failover_slot: true"))
	adopt := withPostgres(sURL, "primary_url: "+pURL)
	pgtest.Exec(t, pURL, "ALTER TABLE "+ss.ob.Table+" ADD COLUMN sent_at timestamptz")
	b, _ := os.ReadFile(adopt)
	writeFile(t, adopt, string(b)+"columns: {sent_at: sent_at}\n")
	refused("cdc init --adopt with primary_url", []string{"init"}, 2, []string{"--adopt", "standby"}, adopt, "--adopt")
	if ss.slotOn(t, sURL) || ss.slotOn(t, pURL) {
		t.Errorf("a refusal created the slot")
	}

	// hot_standby_feedback off is a warning: cdc init, cdc status and cdc
	// run say it and go on.
	onStandby := withPostgres(sURL, "primary_url: "+pURL)
	const warning = "hot_standby_feedback is off on the standby"
	code, stdout, stderr := cdc(t, nil, "init", "--config", onStandby)
	if code != 0 || !strings.Contains(stdout+stderr, "warning: "+warning) || !ss.slotOn(t, sURL) {
		t.Errorf("cdc init with hot_standby_feedback off exited %d, want 0 with a warning and the slot on the standby:\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := cdc(t, nil, "status", "--config", onStandby); code != 0 || !strings.Contains(stdout, warning) || !strings.Contains(stdout, "hot_standby_feedback off") {
		t.Errorf("cdc status with hot_standby_feedback off exited %d, want 0 with the warning:\n%s%s", code, stdout, stderr)
	}
	r := startCDC(t, "run", "--config", onStandby)
	pgtest.Await(t, 30*time.Second, "cdc run's warning", func() bool { return strings.Contains(r.Stderr.String(), warning) })
	r.Stop(t)

	// Promoted while the old primary still runs: followed, with a warning.
	if err := ss.standby.Promote(); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = cdc(t, nil, "status", "--config", onStandby)
	if code != 0 || !strings.Contains(stdout, "topology:      promoted") || !strings.Contains(stdout, "remove postgres.primary_url") {
		t.Errorf("cdc status of a standby promoted beside its running primary exited %d, want 0, topology promoted:\n%s%s", code, stdout, stderr)
	}

	// A standby of PostgreSQL 15 (the machine's, or the npm package's)
	// cannot hold a logical slot.
	p15 := pgtest.StartCluster(t, pgtest.Options{Version: 15})
	s15 := pgtest.StandbyOf(t, p15, "hot_standby_feedback = on")
	ob15 := relaytest.NewOutbox(t, p15.URL("postgres"))
	ob15.URL = s15.URL("postgres")
	cfg15 := ob15.Config(t, "  - {name: out, kind: stdout}", "")
	addPostgres(t, cfg15, "primary_url: "+p15.URL("postgres"))
	refused("a standby of PostgreSQL 15", both, 1, []string{"16 or later", "15."}, cfg15)
}

// TestIntegrationStandbyDecodingIdleOutboxAndRetentionFollowTheStandbysSlot:
// with the slot on a standby, relay.retention takes its marks on the
// primary and proves them by the slot's confirmed position read on the
// standby: delivered rows are deleted; and with the outbox idle while
// another table is busy on the primary, the standby's slot is confirmed
// past that WAL (invariant 4: the heartbeat is written on the primary).
func TestIntegrationStandbyDecodingIdleOutboxAndRetentionFollowTheStandbysSlot(t *testing.T) {
	t.Parallel()
	v := standbyVersions(t)[0]
	ss := newStandbySetupWith(t, v, "relay:\n  retention: {keep: 1s, margin: 0s, interval: 200ms}", "hot_standby_feedback = on")
	cdcInit(t, ss.cfg)
	ctx := context.Background()
	primary := pgtest.Connect(t, ss.primary.URL("postgres"))
	standby := pgtest.Connect(t, ss.standby.URL("postgres"))
	r := startCDC(t, "run", "--config", ss.cfg)
	msgs := standbyMsgs("kept", 20)
	ss.ob.InsertTx(t, primary, msgs...)
	relaytest.WaitAllDelivered(t, ss.out, msgs, 60*time.Second, r.Logs)
	left := func() int {
		var n int
		if err := primary.QueryRow(ctx, "SELECT count(*) FROM "+ss.ob.Table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	start := time.Now()
	if !pgtest.WaitFor(60*time.Second, func() bool { return left() == 0 }) {
		t.Fatalf("retention deleted %d of %d delivered rows in 60 s\n%s", len(msgs)-left(), len(msgs), r.Logs())
	}
	t.Logf("PostgreSQL %d: retention deleted the %d delivered rows %v after their delivery", v, len(msgs), time.Since(start).Round(time.Millisecond))

	pgtest.Exec(t, ss.primary.URL("postgres"), "CREATE TABLE busy_other (n int, pad text)")
	var target string
	for i := 0; i < 5; i++ {
		if _, err := primary.Exec(ctx, "INSERT INTO busy_other SELECT g, repeat('x', 100) FROM generate_series(1, 2000) g"); err != nil {
			t.Fatal(err)
		}
	}
	if err := primary.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&target); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	pgtest.Await(t, 60*time.Second, "the standby's slot confirmed past the other table's WAL", func() bool {
		var past bool
		standby.QueryRow(ctx, "SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2", target, ss.ob.Slot).Scan(&past)
		return past
	})
	t.Logf("PostgreSQL %d: idle outbox, busy primary: the standby's slot confirmed past %s %v later", v, target, time.Since(start).Round(time.Millisecond))
	r.Stop(t)
}

// TestIntegrationStandbyDecodingSkipParksTheBadRowOnThePrimary: a row
// that cannot be mapped stops the relay reading the slot on a standby
// (relay.on_invalid: stop) with the cdc skip line; cdc skip reads the
// slot on the standby and parks the row in the primary's dead-letter
// table; cdc run then goes on past it.
func TestIntegrationStandbyDecodingSkipParksTheBadRowOnThePrimary(t *testing.T) {
	t.Parallel()
	v := standbyVersions(t)[0]
	ss := newStandbySetup(t, v, "hot_standby_feedback = on")
	pURL := ss.primary.URL("postgres")
	pgtest.Exec(t, pURL, "ALTER TABLE "+ss.ob.Table+" ALTER COLUMN payload TYPE text")
	cdcInit(t, ss.cfg)
	ctx := context.Background()
	primary := pgtest.Connect(t, pURL)
	good, after := relaytest.NewMsg("ok", "k", 1), relaytest.NewMsg("after", "k", 3)
	ss.ob.InsertTx(t, primary, good)
	bad := relaytest.NewMsg("bad", "k", 2)
	if _, err := primary.Exec(ctx, "INSERT INTO "+ss.ob.Table+" (id, type, key, payload) VALUES ($1, 'bad', 'k', 'not json')", bad.ID); err != nil {
		t.Fatal(err)
	}
	ss.ob.InsertTx(t, primary, after)
	p := startCDC(t, "run", "--config", ss.cfg)
	if code := p.Wait(60 * time.Second); code != 1 {
		t.Fatalf("cdc run at the bad row exited %d, want 1\n%s", code, p.Logs())
	}
	m := regexp.MustCompile(`cdc skip --config \S+ --lsn (\S+)`).FindStringSubmatch(p.Stderr.String())
	if m == nil || !strings.Contains(p.Stderr.String(), bad.ID) {
		t.Fatalf("the error does not name the row and cdc skip:\n%s", lastLine(p.Stderr.String()))
	}
	code, stdout, stderr := cdc(t, nil, "skip", "--config", ss.cfg, "--lsn", m[1])
	if code != 0 {
		t.Fatalf("cdc skip --lsn %s exited %d:\n%s%s", m[1], code, stdout, stderr)
	}
	var parked int
	if err := primary.QueryRow(ctx, "SELECT count(*) FROM public.walpost_dead_letter WHERE slot = $1", ss.ob.Slot).Scan(&parked); err != nil || parked != 1 {
		t.Fatalf("the primary's dead-letter table holds %d row(s) of the slot (%v), want 1", parked, err)
	}
	p = startCDC(t, "run", "--config", ss.cfg)
	relaytest.WaitAllDelivered(t, ss.out, []relaytest.Msg{good, after}, 60*time.Second, p.Logs)
	for _, l := range relaytest.ReadLines(t, ss.out) {
		if l.ID == bad.ID {
			t.Errorf("the skipped row was delivered")
		}
	}
	t.Logf("PostgreSQL %d: cdc skip --lsn %s parked the bad row on the primary; cdc run went on past it", v, m[1])
	p.Stop(t)
}
