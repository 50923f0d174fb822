package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// Rows written by COPY share WAL positions (docs/design.md, "A message's
// position"): these tests write their outbox rows with pgx CopyFrom and
// check first that the slot holds fewer distinct LSNs than rows.

// copyMsgs returns n messages over a few keys.
func copyMsgs(n int) []relaytest.Msg {
	msgs := make([]relaytest.Msg, n)
	for i := range msgs {
		msgs[i] = relaytest.NewMsg("copied", fmt.Sprintf("k%d", i%7), i)
	}
	return msgs
}

// requireSharedLSNs fails the test unless the slot's pending INSERTs, n of
// them, share LSNs (the multi-insert the tests are about).
func requireSharedLSNs(t *testing.T, ob relaytest.Outbox, n int) {
	t.Helper()
	conn := pgtest.Connect(t, ob.URL)
	rows, lsns := ob.PendingInsertLSNs(t, conn)
	if rows != n || lsns >= rows {
		t.Fatalf("COPY of %d rows: the slot holds %d INSERTs at %d distinct LSNs; the test needs rows that share an LSN", n, rows, lsns)
	}
	t.Logf("COPY of %d rows: %d distinct LSNs", n, lsns)
}

// countingHook accepts the first limit distinct messages (and any message
// it accepted before, again), answers 503 to the others, and counts what
// it accepted by id.
type countingHook struct {
	limit   atomic.Int64
	refused atomic.Int64
	mu      sync.Mutex
	got     map[string]int
}

func (h *countingHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	id := r.Header.Get("X-Message-Id")
	h.mu.Lock()
	if h.got[id] == 0 && int64(len(h.got)) >= h.limit.Load() {
		h.mu.Unlock()
		h.refused.Add(1)
		http.Error(w, "down for the test", http.StatusServiceUnavailable)
		return
	}
	h.got[id]++
	h.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (h *countingHook) missing(msgs []relaytest.Msg) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, m := range msgs {
		if h.got[m.ID] == 0 {
			out = append(out, m.ID)
		}
	}
	return out
}

func (h *countingHook) distinct() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.got)
}

// TestIntegrationCopyRowsSharingAnLSNAreNotTakenForAcknowledgedAfterARestart:
// 300 rows written by one COPY go to a webhook (which acknowledges message
// by message) that accepts 150 and then answers 503: the sink's saved
// progress ends inside a group of rows that share an LSN. The relay is
// stopped, by SIGTERM or by kill -9 once the progress table holds that
// position, and started again with the webhook healthy: every row reaches
// it (the rows after the acknowledged one at the same LSN were skipped as
// "acknowledged before a restart" when progress was an LSN).
func TestIntegrationCopyRowsSharingAnLSNAreNotTakenForAcknowledgedAfterARestart(t *testing.T) {
	t.Parallel()
	for _, stop := range []string{"SIGTERM", "kill -9"} {
		t.Run(stop, func(t *testing.T) {
			t.Parallel()
			copyPartialAckThenRestart(t, pgtest.URL(t), stop == "kill -9")
		})
	}
}

// copyPartialAckThenRestart is one case of
// TestIntegrationCopyRowsSharingAnLSNAreNotTakenForAcknowledgedAfterARestart
// on the database at url (also TestIntegrationVersions).
func copyPartialAckThenRestart(t *testing.T, url string, kill bool) {
	ob := relaytest.NewOutbox(t, url)
	hook := &countingHook{got: map[string]int{}}
	hook.limit.Store(150)
	srv := httptest.NewServer(hook)
	t.Cleanup(srv.Close)
	cfg := ob.Config(t, fmt.Sprintf("  - {name: hook, kind: webhook, url: %q, timeout: 2s}", srv.URL+"/hook"),
		"relay: {shutdown_timeout: 2s, retry_backoff: 200ms}")
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	msgs := copyMsgs(300)
	ob.CopyTx(t, conn, msgs...)
	requireSharedLSNs(t, ob, len(msgs))

	p := startCDC(t, "run", "--config", cfg)
	if !pgtest.WaitFor(60*time.Second, func() bool { return hook.distinct() >= 150 && hook.refused.Load() > 0 }) {
		t.Fatalf("the webhook accepted %d messages and refused %d, want 150 and some\n%s", hook.distinct(), hook.refused.Load(), p.Stderr.String())
	}
	var lsn string
	var seq int64
	saved := func() bool {
		return conn.QueryRow(context.Background(), "SELECT lsn::text, seq FROM public.walpost_sink_progress WHERE slot = $1 AND sink = 'hook'",
			ob.Slot).Scan(&lsn, &seq) == nil && seq > 0
	}
	if kill {
		if !pgtest.WaitFor(30*time.Second, saved) {
			t.Fatalf("no progress inside the COPY's group saved for the webhook\n%s", p.Stderr.String())
		}
		p.Kill9(t)
	} else {
		p.Cmd.Process.Signal(syscall.SIGTERM)
		if code := p.Wait(30 * time.Second); code < 0 {
			t.Fatalf("the relay did not stop after SIGTERM\n%s", p.Stderr.String())
		}
		if !saved() {
			t.Fatalf("no progress inside the COPY's group saved for the webhook\n%s", p.Stderr.String())
		}
	}
	t.Logf("the webhook's saved progress: lsn %s, seq %d", lsn, seq)

	hook.limit.Store(1 << 40)
	p = startCDC(t, "run", "--config", cfg)
	if !pgtest.WaitFor(60*time.Second, func() bool { return len(hook.missing(msgs)) == 0 }) {
		t.Fatalf("after the restart the webhook still lacks %d of %d rows written by one COPY\n%s",
			len(hook.missing(msgs)), len(msgs), p.Stderr.String())
	}
	p.Stop(t)
}

// TestIntegrationEveryBadRowOfOneCopyIsParkedOnItsOwn: two rows that
// cannot be mapped (an empty type) in one COPY, at the same LSN, under
// on_invalid: dead_letter: both are parked, each with its own seq, every
// other row is delivered, and cdc dead-letter names each by LSN:seq.
func TestIntegrationEveryBadRowOfOneCopyIsParkedOnItsOwn(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "relay: {on_invalid: dead_letter}")
	dlq := relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	msgs := copyMsgs(200)
	msgs[10].Type, msgs[20].Type = "", ""
	ob.CopyTx(t, conn, msgs...)
	requireSharedLSNs(t, ob, len(msgs))
	good := append(append(append([]relaytest.Msg(nil), msgs[:10]...), msgs[11:20]...), msgs[21:]...)

	p := startCDC(t, "run", "--config", cfg)
	relaytest.WaitAllDelivered(t, out, good, 60*time.Second, p.Stderr.String)
	if !pgtest.WaitFor(10*time.Second, func() bool { return len(listParked(t, cfg)) == 2 }) {
		var n int
		conn.QueryRow(context.Background(), "SELECT count(*) FROM "+dlq).Scan(&n)
		t.Fatalf("%d rows parked, want the 2 bad rows of the COPY\n%s", n, p.Stderr.String())
	}
	p.Stop(t)
	rows := listParked(t, cfg)
	if *rows[0].ID != msgs[10].ID || *rows[1].ID != msgs[20].ID || rows[0].LSN != rows[1].LSN || rows[0].Seq == rows[1].Seq {
		t.Fatalf("parked %+v, want %s and %s at one LSN with seqs of their own", rows, msgs[10].ID, msgs[20].ID)
	}
	at := fmt.Sprintf("%s:%d", rows[1].LSN, rows[1].Seq)
	code, stdout, stderr := cdc(t, nil, "dead-letter", "--config", cfg, "show", at)
	if code != 0 || !strings.Contains(stdout, msgs[20].ID) || strings.Contains(stdout, msgs[10].ID) {
		t.Fatalf("dead-letter show %s: exit %d, want only %s\n%s%s", at, code, msgs[20].ID, stdout, stderr)
	}
	code, stdout, _ = cdc(t, nil, "dead-letter", "--config", cfg, "show", rows[0].LSN)
	if code != 0 || !strings.Contains(stdout, msgs[20].ID) || !strings.Contains(stdout, msgs[10].ID) {
		t.Fatalf("dead-letter show %s (a bare LSN names every row at it): exit %d\n%s", rows[0].LSN, code, stdout)
	}
}

var skipAdvice = regexp.MustCompile(`cdc skip --config \S+ --lsn (\S+)`)

// TestIntegrationSkipParksEachBadRowOfOneCopy: under on_invalid: stop,
// two bad rows at one LSN stop the relay one after the other; each stop
// names its row by LSN:seq, cdc skip parks exactly that row (the second
// by its bare LSN: the first unparked bad row at it), and the next run
// delivers every good row of the COPY.
func TestIntegrationSkipParksEachBadRowOfOneCopy(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "")
	relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	msgs := copyMsgs(200)
	msgs[10].Type, msgs[20].Type = "", ""
	ob.CopyTx(t, conn, msgs...)
	requireSharedLSNs(t, ob, len(msgs))

	stopsAt := func() string {
		t.Helper()
		p := startCDC(t, "run", "--config", cfg)
		if code := p.Wait(60 * time.Second); code != 1 {
			t.Fatalf("relay at a bad row: exit %d, want 1\n%s", code, p.Stderr.String())
		}
		m := skipAdvice.FindStringSubmatch(p.Stderr.String())
		if m == nil {
			t.Fatalf("the relay's stop gives no cdc skip command\n%s", p.Stderr.String())
		}
		return strings.TrimRight(m[1], `"\`)
	}
	first := stopsAt()
	if !strings.Contains(first, ":") {
		t.Fatalf("the first bad row is row 11 of its LSN, the advice names %s (no :seq)", first)
	}
	if code, stdout, stderr := cdc(t, nil, "skip", "--config", cfg, "--lsn", first); code != 0 || !strings.Contains(stdout, msgs[10].ID) {
		t.Fatalf("skip --lsn %s: exit %d, want %s parked\n%s%s", first, code, msgs[10].ID, stdout, stderr)
	}
	second := stopsAt()
	if second == first {
		t.Fatalf("after skipping %s the relay stops at it again", first)
	}
	lsn, _, _ := strings.Cut(second, ":")
	if code, stdout, stderr := cdc(t, nil, "skip", "--config", cfg, "--lsn", lsn); code != 0 || !strings.Contains(stdout, msgs[20].ID) {
		t.Fatalf("skip --lsn %s: exit %d, want %s parked\n%s%s", lsn, code, msgs[20].ID, stdout, stderr)
	}
	good := append(append(append([]relaytest.Msg(nil), msgs[:10]...), msgs[11:20]...), msgs[21:]...)
	p := startCDC(t, "run", "--config", cfg)
	relaytest.WaitAllDelivered(t, out, good, 60*time.Second, p.Stderr.String)
	p.Stop(t)
	if rows := listParked(t, cfg); len(rows) != 2 {
		t.Fatalf("parked %+v, want the two skipped rows", rows)
	}
}

// The state tables as walpost made them before rows were told apart by
// seq (progress without seq and commit_time; dead letters keyed by (slot,
// lsn, sink), without seq and resent_at).
const (
	oldProgressDDL = `CREATE TABLE %s (slot text NOT NULL, sink text NOT NULL, commit_lsn pg_lsn NOT NULL, lsn pg_lsn NOT NULL,
		updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (slot, sink))`
	oldDeadLetterDDL = `CREATE TABLE %s (slot text NOT NULL, lsn pg_lsn NOT NULL, sink text NOT NULL DEFAULT '', commit_lsn pg_lsn NOT NULL,
		message_id text, error text NOT NULL, row_data jsonb NOT NULL, parked_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (slot, lsn, sink))`
)

// TestIntegrationStateTablesOfAnOlderWalpostAreUpgraded: progress and
// dead-letter tables in an older walpost's layout, with a parked row.
// cdc run as the relay role of sql/roles.sql (not the tables' owner) stops
// before streaming and says to run cdc init; cdc init (as the owner)
// upgrades both, keeping the parked row; then the relay role streams.
func TestIntegrationStateTablesOfAnOlderWalpostAreUpgraded(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	progress := "public." + pgtest.Name(t, "prog")
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP TABLE IF EXISTS "+progress) })
	sink := fmt.Sprintf("  - {name: out, kind: file, path: %s}", out)
	adminCfg := ob.Config(t, sink, "")
	dlq := relaytest.WithDeadLetterTable(t, url, adminCfg)
	addPostgres(t, adminCfg, "progress_table: "+progress)
	cdcInit(t, adminCfg)
	pgtest.Exec(t, url, "DROP TABLE "+progress+"; DROP TABLE "+dlq)
	pgtest.Exec(t, url, fmt.Sprintf(oldProgressDDL, progress))
	pgtest.Exec(t, url, fmt.Sprintf(oldDeadLetterDDL, dlq))
	pgtest.Exec(t, url, fmt.Sprintf(`INSERT INTO %s (slot, lsn, sink, commit_lsn, message_id, error, row_data)
		VALUES ('%s', '0/10', '', '0/20', 'old', 'parked by an older walpost', '{"id": "old"}')`, dlq, ob.Slot))

	role := pgtest.Name(t, "relay")
	sql, err := os.ReadFile("../../sql/roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, url, strings.NewReplacer("walpost_relay", role, "public.outbox", ob.Table,
		"public.walpost_sink_progress", progress, "public.walpost_dead_letter", dlq).Replace(string(sql)))
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP OWNED BY "+role+"; DROP ROLE "+role) })
	relayOB := ob
	relayOB.URL = strings.Replace(url, "postgres@", role+":change-me@", 1)
	cfg := relayOB.Config(t, sink, "")
	addPostgres(t, cfg, "progress_table: "+progress, "dead_letter_table: "+dlq)

	p := startCDC(t, "run", "--config", cfg)
	if code := p.Wait(60 * time.Second); code != 1 || !strings.Contains(p.Stderr.String(), "made by an older walpost") ||
		!strings.Contains(p.Stderr.String(), "run 'cdc init'") {
		t.Fatalf("cdc run on an older walpost's tables, not their owner: exit %d, want 1 saying to run cdc init\n%s", code, p.Stderr.String())
	}
	if code, stdout, stderr := cdc(t, nil, "status", "--config", adminCfg); code != 1 || !strings.Contains(stdout+stderr, "made by an older walpost and lacks column seq") ||
		!strings.Contains(stdout, "lacks the columns in which the relay records a failing sink") {
		t.Fatalf("cdc status on an older walpost's tables: exit %d, want 1 naming what they lack\n%s%s", code, stdout, stderr)
	}
	var initOut strings.Builder
	if code := run([]string{"init", "--config", adminCfg}, &initOut, &initOut); code != 0 ||
		!strings.Contains(initOut.String(), "upgraded: added column seq, column commit_time") ||
		!strings.Contains(initOut.String(), "upgraded: added column resent_at, column seq, column hold_key, column held_behind, primary key (slot, lsn, seq, sink)") {
		t.Fatalf("cdc init: exit %d, want both tables upgraded\n%s", code, initOut.String())
	}
	var strays int // columns of the progress table's upgrade on another state table
	if err := pgtest.Connect(t, url).QueryRow(context.Background(), `SELECT count(*) FROM pg_attribute
		WHERE attrelid IN (to_regclass('public.walpost_coverage'), to_regclass('public.walpost_adopt')) AND attname IN ('seq', 'commit_time')`).Scan(&strays); err != nil || strays != 0 {
		t.Fatalf("cdc init added %d upgrade column(s) to the coverage or adopt table (%v)", strays, err)
	}
	if rows := listParked(t, adminCfg); len(rows) != 1 || *rows[0].ID != "old" || rows[0].Seq != 0 {
		t.Fatalf("after the upgrade the dead-letter table holds %+v, want the older walpost's row", rows)
	}

	if code, stdout, stderr := cdc(t, nil, "status", "--config", adminCfg); code != 0 || strings.Contains(stdout+stderr, "older walpost") ||
		strings.Contains(stdout, "records a failing sink") {
		t.Fatalf("cdc status after cdc init: exit %d, want 0\n%s%s", code, stdout, stderr)
	}
	conn := pgtest.Connect(t, url)
	msgs := copyMsgs(150)
	ob.CopyTx(t, conn, msgs...)
	p = startCDC(t, "run", "--config", cfg)
	relaytest.WaitAllDelivered(t, out, msgs, 60*time.Second, p.Stderr.String)
	if !pgtest.WaitFor(10*time.Second, func() bool {
		var seq int64
		var at *time.Time
		conn.QueryRow(context.Background(), "SELECT seq, commit_time FROM "+progress+" WHERE slot = $1 AND sink = 'out'", ob.Slot).Scan(&seq, &at)
		return at != nil
	}) {
		t.Fatalf("no progress with a commit time saved\n%s", p.Stderr.String())
	}
	p.Stop(t)
}
