package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/outbox"
)

// retentionOutbox is a test's outbox with a marks table of its own.
type retentionOutbox struct {
	relaytest.Outbox
	marks string
	conn  *pgx.Conn
}

func newRetentionOutbox(t *testing.T) retentionOutbox {
	url := pgtest.URL(t)
	ro := retentionOutbox{Outbox: relaytest.NewOutbox(t, url), marks: "public." + pgtest.Name(t, "marks"), conn: pgtest.Connect(t, url)}
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP TABLE IF EXISTS "+ro.marks) })
	return ro
}

// retention is the relay.retention YAML of ro with settings (a flow
// mapping's entries).
func (ro retentionOutbox) retention(settings string) string {
	return fmt.Sprintf("relay:\n  retry_backoff: 300ms\n  retention: {marks_table: %s, %s}", ro.marks, settings)
}

func (ro retentionOutbox) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	if err := ro.conn.QueryRow(context.Background(), "SELECT count(*) FROM "+ro.Table+" WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// rounds waits until n rounds of retention ran whole after the call. A
// round takes its mark first, and the newest mark is never pruned: a mark
// newer than since means a round started after since; one newer than the
// time that was seen means that round has ended (rounds run one after
// the other).
func (ro retentionOutbox) rounds(t *testing.T, n int, p *proc) {
	t.Helper()
	ctx := context.Background()
	markAfterNow := func() {
		var since time.Time
		if err := ro.conn.QueryRow(ctx, "SELECT now()").Scan(&since); err != nil {
			t.Fatal(err)
		}
		pgtest.Await(t, 30*time.Second, "a retention round", func() bool {
			var newest *time.Time
			ro.conn.QueryRow(ctx, "SELECT max(taken_at) FROM "+ro.marks+" WHERE slot = $1", ro.Slot).Scan(&newest)
			return newest != nil && newest.After(since)
		})
	}
	for range n {
		markAfterNow()
		markAfterNow()
	}
	if p.Exited() {
		t.Fatalf("relay exited\n%s", p.Stderr.String())
	}
}

// hook is a webhook receiver that answers 503 while down.
type hook struct {
	down atomic.Bool
	mu   sync.Mutex
	seen map[string]int // id -> status answered last
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	status := http.StatusOK
	if h.down.Load() {
		status = http.StatusServiceUnavailable
	}
	h.mu.Lock()
	h.seen[r.Header.Get("Idempotency-Key")] = status
	h.mu.Unlock()
	w.WriteHeader(status)
}

// answered counts the messages of msgs whose last request got status.
func (h *hook) answered(msgs []relaytest.Msg, status int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range msgs {
		if h.seen[m.ID] == status {
			n++
		}
	}
	return n
}

func ids(msgs []relaytest.Msg) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// TestIntegrationRetentionNeverDeletesARowItsSlotHasNotConfirmed
// (invariant 13): with a webhook sink answering 503, rows committed
// during the outage stay in the table while they are many times older
// than keep + margin and retention rounds keep running; once the sink is
// back and the slot confirms them, they are deleted. Rows delivered
// before the outage are deleted as soon as they are older than keep.
func TestIntegrationRetentionNeverDeletesARowItsSlotHasNotConfirmed(t *testing.T) {
	t.Parallel()
	ro := newRetentionOutbox(t)
	h := &hook{seen: map[string]int{}}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	port, err := pgtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := ro.Config(t, fmt.Sprintf("  - {name: hook, kind: webhook, url: %q, timeout: 2s, max_retry_after: 0s}", srv.URL),
		ro.retention("keep: 1s, margin: 1s, interval: 200ms, batch: 2, pause: 10ms")+"\nhttp: {listen: "+addr+"}")
	cdcInit(t, cfg)
	p := startCDC(t, "run", "--config", cfg)

	before := make([]relaytest.Msg, 5)
	for i := range before {
		before[i] = relaytest.NewMsg("before", "k", i)
	}
	ro.InsertTx(t, ro.conn, before...)
	pgtest.Await(t, 30*time.Second, "the rows before the outage delivered and deleted", func() bool {
		return h.answered(before, 200) == len(before) && ro.count(t, "true") == 0
	})

	h.down.Store(true)
	during := make([]relaytest.Msg, 7)
	for i := range during {
		during[i] = relaytest.NewMsg("during", "k", i)
	}
	ro.InsertTx(t, ro.conn, during...)
	var committedAt time.Time
	if err := ro.conn.QueryRow(context.Background(), "SELECT now()").Scan(&committedAt); err != nil {
		t.Fatal(err)
	}
	pgtest.Await(t, 30*time.Second, "the sink refusing the rows", func() bool { return h.answered(during[:1], 503) == 1 })
	// Until the rows are 5× keep + margin old, with rounds running all the
	// while, every one of them stays.
	for {
		ro.rounds(t, 1, p)
		if n := ro.count(t, "id = ANY($1::uuid[])", ids(during)); n != len(during) {
			t.Fatalf("retention deleted %d row(s) the sink never acknowledged\n%s", len(during)-n, p.Stderr.String())
		}
		var age time.Duration
		ro.conn.QueryRow(context.Background(), "SELECT now() - $1::timestamptz", committedAt).Scan(&age)
		if age > 10*time.Second {
			break
		}
	}
	if h.answered(during, 200) != 0 {
		t.Fatal("the sink acknowledged a message while down: the test proves nothing")
	}

	h.down.Store(false)
	pgtest.Await(t, 60*time.Second, "the rows of the outage delivered and then deleted", func() bool {
		return h.answered(during, 200) == len(during) && ro.count(t, "true") == 0
	})
	_, _, metrics := get(t, addr, "/metrics", "")
	want := fmt.Sprintf("walpost_retention_deleted_total %d", len(before)+len(during))
	if !strings.Contains(metrics, want) {
		t.Fatalf("want %s, got:\n%s", want, grepLines(metrics, "retention"))
	}
}

// insertAged commits, in one transaction, one row per name whose
// created_at is now() minus the given age, and returns their ids by name.
func (ro retentionOutbox) insertAged(t *testing.T, ages map[string]string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	err := pgx.BeginFunc(ctx, ro.conn, func(tx pgx.Tx) error {
		for name, age := range ages {
			var id string
			if err := tx.QueryRow(ctx, "INSERT INTO "+ro.Table+" (id, type, payload, created_at) VALUES (gen_random_uuid(), $1, '{}', now() - $2::interval) RETURNING id::text",
				name, age).Scan(&id); err != nil {
				return err
			}
			out[name] = id
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestIntegrationRetentionBoundaryKeepAndMargin (invariant 13): a row is
// deleted once its time is before both now − keep and the confirmed
// mark's time − margin: a minute on either side of keep (with a small
// margin), and of margin (with a small keep), decides. Rows just inside
// stay while rounds go on after the rows just outside were deleted.
func TestIntegrationRetentionBoundaryKeepAndMargin(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, settings, bound string }{
		{"keep", "keep: 1h, margin: 1s", "1 hour"},
		{"margin", "keep: 1s, margin: 1h", "1 hour"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ro := newRetentionOutbox(t)
			out := t.TempDir() + "/out.jsonl"
			cfg := ro.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), ro.retention(c.settings+", interval: 200ms"))
			cdcInit(t, cfg)
			p := startCDC(t, "run", "--config", cfg)
			rows := ro.insertAged(t, map[string]string{
				"outside": c.bound + " 1 minute", "inside": c.bound + " -1 minute", "new": "0s",
			})
			pgtest.Await(t, 30*time.Second, "the row outside the "+c.name+" deleted", func() bool {
				return relaytest.CountLines(out) == 3 && ro.count(t, "id = $1", rows["outside"]) == 0
			})
			ro.rounds(t, 3, p)
			if n := ro.count(t, "id = ANY($1::uuid[])", []string{rows["inside"], rows["new"]}); n != 2 {
				t.Fatalf("%d of the rows inside the %s left; want both\n%s", n, c.name, p.Stderr.String())
			}
		})
	}
}

// TestIntegrationDeleteAfterInsertRowsStream: rows written with
// outbox.Writer{DeleteAfterInsert: true} are streamed as written (a
// TOASTed 300 kB payload too) while the table stays empty; a rolled-back
// one is not; a row written without the option stays.
func TestIntegrationDeleteAfterInsertRowsStream(t *testing.T) {
	t.Parallel()
	ro := newRetentionOutbox(t)
	out := t.TempDir() + "/out.jsonl"
	cfg := ro.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "")
	cdcInit(t, cfg)
	p := startCDC(t, "run", "--config", cfg)
	ctx := context.Background()

	big := relaytest.NewMsg("big", "k", 0)
	var blob strings.Builder
	for i := 0; blob.Len() < 300_000; i++ {
		fmt.Fprintf(&blob, "%016x", uint64(i)*0x9E3779B97F4A7C15) // scarcely compressible
	}
	big.Payload = `{"blob": "` + blob.String() + `"}`
	deleted := []relaytest.Msg{relaytest.NewMsg("gone", "k", 1), big, relaytest.NewMsg("gone", "k", 2)}
	w := outbox.Writer{Table: ro.Table, DeleteAfterInsert: true}
	enqueue := func(tx pgx.Tx, msgs ...relaytest.Msg) error {
		for _, m := range msgs {
			if err := w.Enqueue(ctx, tx, outbox.Message{ID: m.ID, Type: m.Type, Key: m.Key, Payload: json.RawMessage(m.Payload)}); err != nil {
				return err
			}
		}
		return nil
	}
	if err := pgx.BeginFunc(ctx, ro.conn, func(tx pgx.Tx) error { return enqueue(tx, deleted...) }); err != nil {
		t.Fatal(err)
	}
	rolledBack := relaytest.NewMsg("rolled-back", "k", 3)
	tx, err := ro.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := enqueue(tx, rolledBack); err != nil {
		t.Fatal(err)
	}
	tx.Rollback(ctx)
	kept := relaytest.NewMsg("kept", "k", 4)
	ro.InsertTx(t, ro.conn, kept)

	lines := relaytest.WaitAllDelivered(t, out, append(deleted, kept), 30*time.Second, p.Stderr.String)
	byID := map[string]relaytest.Line{}
	for _, l := range lines {
		byID[l.ID] = l
	}
	if _, ok := byID[rolledBack.ID]; ok || len(lines) != 4 {
		t.Fatalf("want exactly the 4 committed messages, got %d lines (rolled back delivered: %v)", len(lines), ok)
	}
	for _, m := range append(deleted, kept) {
		var got, want any
		if err := json.Unmarshal(byID[m.ID].Payload, &got); err != nil {
			t.Fatal(err)
		}
		json.Unmarshal([]byte(m.Payload), &want)
		if !reflect.DeepEqual(got, want) || byID[m.ID].Type != m.Type {
			t.Fatalf("message %s (%s) delivered as type %s with a payload of %d bytes, unlike the one written", m.ID, m.Type, byID[m.ID].Type, len(byID[m.ID].Payload))
		}
	}
	if n := ro.count(t, "true"); n != 1 || ro.count(t, "id = $1", kept.ID) != 1 {
		t.Fatalf("the table holds %d rows; want only the one written without DeleteAfterInsert", n)
	}
}

// TestIntegrationRetentionChecksAtStart: `cdc run` with relay.retention
// stops at start, naming the setting and what to do, when the marks table
// is missing (cdc init creates it), the column is missing or not a
// timestamp, or the relay's role may not delete (sql/roles.sql's
// commented grants, which then suffice); a bad setting exits 2 with its
// field and line.
func TestIntegrationRetentionChecksAtStart(t *testing.T) {
	t.Parallel()
	ro := newRetentionOutbox(t)
	url := ro.URL
	out := t.TempDir() + "/out.jsonl"
	sink := fmt.Sprintf("  - {name: out, kind: file, path: %s}", out)
	cdcInit(t, ro.Config(t, sink, ""))
	runFails := func(cfg, want string, code int) {
		t.Helper()
		p := startCDC(t, "run", "--config", cfg)
		if got := p.Wait(30 * time.Second); got != code || !strings.Contains(p.Stderr.String(), want) {
			t.Fatalf("cdc run exited %d, want %d with %q:\n%s", got, code, want, p.Stderr.String())
		}
	}
	runFails(ro.Config(t, sink, ro.retention("keep: 0s")), "relay.retention.keep: 0s: set how long delivered rows stay (more than 0, e.g. 168h), or remove relay.retention (line 12)", 2)
	cfg := ro.Config(t, sink, ro.retention("keep: 1h"))
	runFails(cfg, "relay.retention.marks_table: table "+ro.marks+" does not exist; run 'cdc init'", 1)
	cdcInit(t, cfg)
	runFails(ro.Config(t, sink, ro.retention("keep: 1h, column: nope")), `relay.retention.column: table `+ro.Table+` has no column \"nope\"`, 1)
	runFails(ro.Config(t, sink, ro.retention("keep: 1h, column: type")), `relay.retention.column: column \"type\" of `+ro.Table+` has type text; it must be timestamptz or timestamp`, 1)

	role := pgtest.Name(t, "relay")
	sql, err := os.ReadFile("../../sql/roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	grants := strings.NewReplacer("walpost_relay", role, "public.outbox", ro.Table, "public.walpost_retention_marks", ro.marks).Replace(string(sql))
	// The commented retention grants, taken as written: the marks' now;
	// DELETE on the outbox once cdc run asked for it.
	marksGrant, deleteGrant := uncommented(t, grants, "GRANT SELECT, INSERT, DELETE ON "+ro.marks), uncommented(t, grants, "GRANT DELETE ON "+ro.Table)
	pgtest.Exec(t, url, grants, marksGrant)
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP OWNED BY "+role+"; DROP ROLE "+role) })
	relayOB := ro
	relayOB.URL = strings.Replace(url, "postgres@", role+":change-me@", 1)
	relayCfg := relayOB.Config(t, sink, ro.retention("keep: 1s, margin: 0s, interval: 200ms"))
	runFails(relayCfg, "relay.retention: role "+role+" may not delete from "+ro.Table+"; run GRANT DELETE ON "+ro.Table+" TO "+role, 1)
	pgtest.Exec(t, url, deleteGrant)
	p := startCDC(t, "run", "--config", relayCfg)
	m := relaytest.NewMsg("t", "k", 1)
	ro.InsertTx(t, ro.conn, m)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{m}, 30*time.Second, p.Stderr.String)
	pgtest.Await(t, 30*time.Second, "the delivered row deleted by the relay role", func() bool { return ro.count(t, "true") == 0 })
}

// uncommented returns the line of sql that, commented out, starts with
// prefix, without its comment mark.
func uncommented(t *testing.T, sql, prefix string) string {
	t.Helper()
	for _, line := range strings.Split(sql, "\n") {
		if s := strings.TrimSpace(strings.TrimPrefix(line, "--")); strings.HasPrefix(s, prefix) {
			return s
		}
	}
	t.Fatalf("sql/roles.sql has no commented line %q", prefix)
	return ""
}

// TestIntegrationInitForgetsTheMarksOfAnEarlierSlot: a slot dropped and
// created again by cdc init (as after a failover) starts at the current
// WAL, past every mark of the old one; cdc init deletes those marks, which
// would otherwise prove delivered rows the old slot never confirmed. An
// init that finds the slot keeps them.
func TestIntegrationInitForgetsTheMarksOfAnEarlierSlot(t *testing.T) {
	t.Parallel()
	ro := newRetentionOutbox(t)
	cfg := ro.Config(t, "  - {name: out, kind: discard}", ro.retention("keep: 1h"))
	cdcInit(t, cfg)
	pgtest.Exec(t, ro.URL, fmt.Sprintf("INSERT INTO %s (slot, lsn, taken_at) VALUES ('%s', '0/1', now() - interval '1 day'), ('other', '0/1', now())", ro.marks, ro.Slot))
	cdcInit(t, cfg) // the slot exists: its marks stay
	if n := ro.marksOf(t, ro.Slot); n != 1 {
		t.Fatalf("%d marks of the existing slot after cdc init, want 1 kept", n)
	}
	pgtest.DropSlot(t, ro.URL, ro.Slot)
	var out bytes.Buffer
	if code := run([]string{"init", "--config", cfg}, &out, &out); code != 0 {
		t.Fatalf("cdc init exited %d: %s", code, out.String())
	}
	if !strings.Contains(out.String(), "1 mark(s) of an earlier slot "+ro.Slot+" deleted") {
		t.Fatalf("cdc init did not report the forgotten marks:\n%s", out.String())
	}
	if n := ro.marksOf(t, ro.Slot); n != 0 {
		t.Fatalf("%d marks of the dropped slot left, want 0", n)
	}
	if n := ro.marksOf(t, "other"); n != 1 {
		t.Fatalf("another slot's marks were deleted too (%d left)", n)
	}
}

// marksOf counts slot's marks.
func (ro retentionOutbox) marksOf(t *testing.T, slot string) int {
	t.Helper()
	var n int
	if err := ro.conn.QueryRow(context.Background(), "SELECT count(*) FROM "+ro.marks+" WHERE slot = $1", slot).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
