package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationSentAtIsSetOnEveryRowTheSlotPasses: with columns.sent_at
// mapped, every delivered row has its sent-at set and the slot is never
// confirmed past a row whose sent-at is NULL, also when a commit is
// decoded, delivered and acknowledged before it is visible to other
// sessions (docs/design.md, invariant 10). 1,500 two-row transactions
// from four connections while busy processes keep both CPUs loaded, so
// that the gap between a commit's WAL record and its visibility opens by
// itself; and two transactions held invisible on purpose: their commit
// waits for a synchronous standby that never comes (synchronous_standby_names
// names nobody, only they use synchronous_commit = on) until the test
// cancels the wait. The first is held while the relay runs, the second
// across a SIGTERM and a restart.
func TestIntegrationSentAtIsSetOnEveryRowTheSlotPasses(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	pgtest.Exec(t, url, "ALTER TABLE "+ob.Table+" ADD COLUMN sent_at timestamptz")
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out),
		"columns: {id: id, type: type, key: key, payload: payload, headers: headers, sent_at: sent_at}")
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	holdCommitsForAStandbyThatNeverComes(t, url)
	p := startCDC(t, "run", "--config", cfg)

	// The slot, sampled from outside: it must never pass an unmarked row.
	var all []relaytest.Msg
	var held []*heldCommit
	passedUnmarked := watchSlotPassesOnlyMarkedRows(t, url, ob, out)

	stopSpin := spinCPUs(t, 2*runtime.NumCPU())
	const producers, txns = 4, 1500
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for w := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pgx.Connect(ctx, url)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close(ctx)
			for i := range txns / producers {
				msgs := []relaytest.Msg{relaytest.NewMsg("t", fmt.Sprintf("k%d", w), 2*i), relaytest.NewMsg("t", fmt.Sprintf("k%d", w), 2*i+1)}
				if err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error { return ob.Insert(ctx, tx, msgs...) }); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				all = append(all, msgs...)
				mu.Unlock()
			}
		}()
	}
	// Held while the relay runs and the producers go on.
	h := holdCommit(t, ob, url)
	held = append(held, h)
	h.awaitDeliveredAndHeld(t, conn, ob.Slot, out, p)
	h.release(t, conn)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("producer: %v", err)
	}
	stopSpin()
	for _, h := range held {
		all = append(all, h.msgs...)
	}
	relaytest.WaitAllDelivered(t, out, all, 60*time.Second, p.Stderr.String)

	// Held across a SIGTERM: the relay's last status must not pass it.
	h = holdCommit(t, ob, url)
	held = append(held, h)
	all = append(all, h.msgs...)
	h.awaitDeliveredAndHeld(t, conn, ob.Slot, out, p)
	p.Stop(t)
	if c := relaytest.SlotConfirmed(t, conn, ob.Slot); c > h.commit {
		t.Errorf("after a SIGTERM the slot is at %s, past the held transaction (commit %s, xid %d) whose rows were not visible, so not marked", c, h.commit, h.xid)
	}
	h.release(t, conn)
	p = startCDC(t, "run", "--config", cfg)
	if !pgtest.WaitFor(30*time.Second, func() bool { return unmarked(t, conn, ob.Table, h.ids()) == 0 }) {
		t.Errorf("the transaction held across the SIGTERM (xid %d) is still not marked 30 s after the restart", h.xid)
	}
	p.Stop(t)

	// Every row delivered has its sent-at; none the slot passed lacks it.
	lines := relaytest.ReadLines(t, out)
	ids := make([]string, 0, len(lines))
	heldIDs := map[string]bool{}
	for _, h := range held {
		for _, id := range h.ids() {
			heldIDs[id] = true
		}
	}
	for _, l := range lines {
		ids = append(ids, l.ID)
	}
	null := nullSentAt(t, conn, ob.Table, ids)
	var nHeld int
	for _, id := range null {
		if heldIDs[id] {
			nHeld++
		}
	}
	slot := relaytest.SlotConfirmed(t, conn, ob.Slot)
	var past int
	for _, l := range lines {
		if relaytest.ParseLSN(t, l.CommitLSN) < slot && contains(null, l.ID) {
			past++
		}
	}
	if n := passedUnmarked(); n > 0 || len(null) > 0 {
		t.Errorf("%d of %d delivered rows have sent_at NULL (%d of the %d held invisible on purpose, %d of the 3,000 others); "+
			"%d of them are behind the slot (%s); the slot was seen passing an unmarked row %d times while the relay ran",
			len(null), len(lines), nHeld, len(heldIDs), len(null)-nHeld, past, slot, n)
	}
}

// holdCommitsForAStandbyThatNeverComes makes a transaction that sets
// synchronous_commit = on wait at its commit, after its commit record is
// in the WAL (and so decoded and relayed), until its wait is cancelled:
// synchronous_standby_names names a standby that never connects, and
// every other session (the relay's too) commits with synchronous_commit =
// local. Undone when the test ends (which also ends any wait).
func holdCommitsForAStandbyThatNeverComes(t *testing.T, url string) {
	t.Helper()
	pgtest.Exec(t, url, "ALTER SYSTEM SET synchronous_standby_names = 'walpost_test_nobody'",
		"ALTER SYSTEM SET synchronous_commit = 'local'", "SELECT pg_reload_conf()")
	t.Cleanup(func() {
		pgtest.Exec(t, url, "ALTER SYSTEM RESET synchronous_standby_names", "ALTER SYSTEM RESET synchronous_commit", "SELECT pg_reload_conf()")
	})
	pgtest.Await(t, 10*time.Second, "the server to reload synchronous_standby_names", func() bool {
		c, err := pgx.Connect(context.Background(), url)
		if err != nil {
			return false
		}
		defer c.Close(context.Background())
		var names, commit string
		c.QueryRow(context.Background(), "SELECT current_setting('synchronous_standby_names'), current_setting('synchronous_commit')").Scan(&names, &commit)
		return names == "walpost_test_nobody" && commit == "local"
	})
}

// heldCommit is a two-row transaction whose COMMIT waits for the
// synchronous standby: in the WAL, not visible to other sessions.
type heldCommit struct {
	msgs   []relaytest.Msg
	xid    uint32 // as pgoutput's Begin carries it
	pid    uint32
	commit pglogrepl.LSN // its commit record, once delivered
	done   chan error
}

func (h *heldCommit) ids() []string { return []string{h.msgs[0].ID, h.msgs[1].ID} }

// holdCommit commits a two-row transaction whose commit waits for the
// standby that never comes, and returns once it waits.
func holdCommit(t *testing.T, ob relaytest.Outbox, url string) *heldCommit {
	t.Helper()
	ctx := context.Background()
	c := pgtest.Connect(t, url)
	h := &heldCommit{msgs: []relaytest.Msg{relaytest.NewMsg("held", "h", 0), relaytest.NewMsg("held", "h", 1)},
		pid: c.PgConn().PID(), done: make(chan error, 1)}
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var xid8 string
	if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
		t.Fatal(err)
	}
	if err := ob.Insert(ctx, tx, h.msgs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&xid8); err != nil {
		t.Fatal(err)
	}
	x, err := strconv.ParseUint(xid8, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	h.xid = uint32(x)
	go func() { h.done <- tx.Commit(ctx) }()
	check := pgtest.Connect(t, url)
	pgtest.Await(t, 10*time.Second, "the held commit to wait for the synchronous standby", func() bool {
		var ev *string
		check.QueryRow(ctx, "SELECT wait_event FROM pg_stat_activity WHERE pid = $1", h.pid).Scan(&ev)
		return ev != nil && *ev == "SyncRep"
	})
	var seen int
	if err := check.QueryRow(ctx, "SELECT count(*) FROM "+ob.Table+" WHERE id::text = ANY($1)", h.ids()).Scan(&seen); err != nil || seen != 0 {
		t.Fatalf("the held transaction's rows are visible (%d, %v): the hold does not work", seen, err)
	}
	return h
}

// awaitDeliveredAndHeld waits until the held rows are in the file sink
// and the relay either says it waits for the transaction to be visible
// (its xid in the log) or let the slot pass it (what it must not do; the
// test's checks report it).
func (h *heldCommit) awaitDeliveredAndHeld(t *testing.T, conn *pgx.Conn, slot, out string, p *proc) {
	t.Helper()
	pgtest.Await(t, 60*time.Second, "the held rows in the file sink", func() bool {
		n := 0
		for _, l := range linesSoFar(out) {
			if l.ID == h.msgs[0].ID || l.ID == h.msgs[1].ID {
				n++
				h.commit = relaytest.ParseLSN(t, l.CommitLSN)
			}
		}
		return n >= 2
	})
	waiting := fmt.Sprintf(`"xid":%d,`, h.xid)
	pgtest.Await(t, 30*time.Second, "the relay to wait for the held transaction, or the slot to pass it", func() bool {
		for _, l := range strings.Split(p.Stderr.String(), "\n") {
			if strings.Contains(l, waiting) && strings.Contains(l, "not visible") {
				return true
			}
		}
		return relaytest.SlotConfirmed(t, conn, slot) > h.commit
	})
}

// release cancels the held commit's wait: the transaction, committed
// locally, becomes visible.
func (h *heldCommit) release(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), "SELECT pg_cancel_backend($1)", h.pid); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-h.done:
		if err != nil {
			t.Fatalf("the held commit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held commit still waits 10 s after its wait was cancelled")
	}
}

// watchSlotPassesOnlyMarkedRows samples the slot every 100 ms until the
// test ends and counts the samples in which it is past a delivered row
// whose sent-at is NULL; the returned function reads the count.
func watchSlotPassesOnlyMarkedRows(t *testing.T, url string, ob relaytest.Outbox, out string) func() int {
	t.Helper()
	conn := pgtest.Connect(t, url)
	stop, done := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var n int
	go func() {
		defer close(done)
		ctx := context.Background()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			// The slot first: a row it passed and that is NULL after is
			// a row it passed unmarked (marks are never undone).
			var s *string
			if conn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", ob.Slot).Scan(&s) != nil || s == nil {
				continue
			}
			slot, _ := pglogrepl.ParseLSN(*s)
			var past []string
			for _, l := range linesSoFar(out) {
				if c, err := pglogrepl.ParseLSN(l.CommitLSN); err == nil && c < slot {
					past = append(past, l.ID)
				}
			}
			rows, err := conn.Query(ctx, "SELECT count(*) FROM "+ob.Table+" WHERE id::text = ANY($1) AND sent_at IS NULL", past)
			if err != nil {
				continue
			}
			var k int
			for rows.Next() {
				rows.Scan(&k)
			}
			rows.Close()
			if k > 0 {
				mu.Lock()
				n++
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// spinCPUs starts n busy processes (the test's own, ended by their pid)
// and returns the function that ends them.
func spinCPUs(t *testing.T, n int) func() {
	t.Helper()
	var cmds []*exec.Cmd
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			for _, c := range cmds {
				c.Process.Kill()
				c.Wait()
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// unmarked counts the rows of ids whose sent-at is NULL or that are not
// visible (not found).
func unmarked(t *testing.T, conn *pgx.Conn, table string, ids []string) int {
	t.Helper()
	var marked int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+table+" WHERE id::text = ANY($1) AND sent_at IS NOT NULL", ids).Scan(&marked); err != nil {
		t.Fatal(err)
	}
	return len(ids) - marked
}

// nullSentAt returns the ids among ids whose row has sent-at NULL.
func nullSentAt(t *testing.T, conn *pgx.Conn, table string, ids []string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT id::text FROM "+table+" WHERE id::text = ANY($1) AND sent_at IS NULL", ids)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// linesSoFar reads the file sink's lines while the relay writes it: none
// when it cannot be parsed yet (a line half written).
func linesSoFar(path string) []relaytest.Line {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	lines, err := sinktest.ReadLines(f)
	if err != nil {
		return nil
	}
	return lines
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
