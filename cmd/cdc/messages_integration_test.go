package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// messagesOutbox makes a test's table-less outbox and a config with one
// file sink (extra postgres: settings and top-level YAML), and returns the
// database URL, the outbox, the sink's path and the config's path. It does
// not run cdc init.
func messagesOutbox(t *testing.T, postgres, extra string) (url string, mo relaytest.MessagesOutbox, out, cfg string) {
	t.Helper()
	return messagesOutboxOn(t, pgtest.URL(t), postgres, extra)
}

// messagesOutboxOn is messagesOutbox on the database at url.
func messagesOutboxOn(t *testing.T, url, postgres, extra string) (_ string, mo relaytest.MessagesOutbox, out, cfg string) {
	t.Helper()
	mo = relaytest.NewMessagesOutbox(t, url)
	out = filepath.Join(t.TempDir(), "out.jsonl")
	cfg = mo.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), postgres, extra)
	return url, mo, out, cfg
}

// TestIntegrationMessagesOutboxDeliversExactlyTheCommittedMessagesInCommitOrder:
// a table-less outbox through the cdc binary. cdc run refuses to start
// before cdc init; cdc init creates an empty publication, the slot and the
// state tables, and no outbox table. Transactions of mixed sizes emit
// messages among writes to other tables, with heartbeats in between;
// rolled-back transactions, a rolled-back savepoint, other prefixes and
// table rows add nothing. The sink gets exactly the committed messages, in
// commit order, each as emitted (key, headers, JSON payload byte for byte,
// bytes through payload_base64).
func TestIntegrationMessagesOutboxDeliversExactlyTheCommittedMessagesInCommitOrder(t *testing.T) {
	// Not parallel: a heartbeat is written only when the stream has been
	// idle for heartbeat_interval, which other relays' traffic prevents.
	url, mo, out, cfg := messagesOutbox(t, "  heartbeat_interval: 200ms", "")
	p := startCDC(t, "run", "--config", cfg)
	if code := p.Wait(60 * time.Second); code != 1 || !strings.Contains(p.Stderr.String(), mo.Publication+`\" does not exist; run 'cdc init'`) {
		t.Fatalf("cdc run before cdc init: exit %d\n%s", code, p.Stderr.String())
	}
	var initOut bytes.Buffer
	if code := run([]string{"init", "--config", cfg}, &initOut, &initOut); code != 0 {
		t.Fatalf("cdc init: exit %d: %s", code, initOut.String())
	}
	conn := pgtest.Connect(t, url)
	ctx := context.Background()
	var tables int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_publication_tables WHERE pubname = $1", mo.Publication).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if got := initOut.String(); tables != 0 || !strings.Contains(got, "publication "+mo.Publication+": created") ||
		!strings.Contains(got, "no outbox table") || strings.Contains(got, "public.outbox") || !strings.Contains(got, "slot "+mo.Slot+": created") {
		t.Fatalf("cdc init (publication with %d tables):\n%s", tables, got)
	}
	other := "public." + pgtest.Name(t, "other")
	pgtest.Exec(t, url, "CREATE TABLE "+other+" (id serial primary key, v text)")
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP TABLE "+other) })

	p = startCDC(t, "run", "--config", cfg)
	heartbeats := func() int { return strings.Count(p.Stderr.String(), "heartbeat written") }
	var want []relaytest.Msg
	for round, size := range []int{1, 3, 50, 1, 0, 7, 120, 2} {
		msgs := make([]relaytest.Msg, size)
		for j := range msgs {
			msgs[j] = relaytest.NewMsg(fmt.Sprintf("order.%d", j%3), fmt.Sprintf("k%d", j%5), j)
			switch j % 4 {
			case 0:
				msgs[j].Key = "" // no key
			case 1:
				msgs[j].Headers = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "t1"}
			case 2:
				msgs[j].Payload = fmt.Sprintf("%%PDF-1.7 \x00\xff %d", j) // bytes
			case 3:
				msgs[j].Payload = fmt.Sprintf(`{ "n" : %d,  "s": "<é\u00e9>" }`, j)
			}
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO "+other+" (v) VALUES ('before')"); err != nil {
				return err
			}
			if err := mo.Emit(ctx, tx, msgs...); err != nil {
				return err
			}
			// Not the outbox: another prefix, a non-transactional message of
			// another prefix, a rolled-back savepoint.
			if _, err := tx.Exec(ctx, "SELECT pg_logical_emit_message(true, $1, '{}'), pg_logical_emit_message(false, 'app.other', 'x')", mo.Prefix+"x"); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
				return err
			}
			if err := mo.Emit(ctx, tx, relaytest.NewMsg("rolled.back.savepoint", "x", round)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s; INSERT INTO "+other+" (v) VALUES ('after')")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, msgs...)
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := mo.Emit(ctx, tx, relaytest.NewMsg("rolled.back", "x", round)); err != nil {
			t.Fatal(err)
		}
		tx.Rollback(ctx)
		// A heartbeat between rounds: the stream mixes both.
		before := heartbeats()
		pgtest.Await(t, 30*time.Second, "a heartbeat", func() bool { return heartbeats() > before })
	}
	lines := relaytest.WaitAllDelivered(t, out, want, 60*time.Second, p.Stderr.String)
	checkExactly(t, lines, want)
	p.Stop(t)
}

// checkExactly checks that lines are exactly want, in order, as emitted.
func checkExactly(t *testing.T, lines []relaytest.Line, want []relaytest.Msg) {
	t.Helper()
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d", len(lines), len(want))
	}
	var prevCommit, prevLSN pglogrepl.LSN
	for i, l := range lines {
		w := want[i]
		key := ""
		if l.Key != nil {
			key = *l.Key
		}
		payload := string(l.Payload)
		if l.PayloadEncoding == "base64" {
			var b []byte
			if err := json.Unmarshal(l.Payload, &b); err != nil {
				t.Fatalf("line %d: payload %s: %v", i, l.Payload, err)
			}
			payload = string(b)
		}
		if l.ID != w.ID || l.Type != w.Type || key != w.Key || (l.Key != nil) != (w.Key != "") || payload != w.Payload ||
			len(l.Headers) != len(w.Headers) || l.Headers["tenant"] != w.Headers["tenant"] || l.Headers["traceparent"] != w.Headers["traceparent"] {
			t.Fatalf("line %d: got %+v (payload %q), want %+v", i, l, payload, w)
		}
		commit, lsn := relaytest.ParseLSN(t, l.CommitLSN), relaytest.ParseLSN(t, l.LSN)
		if commit < prevCommit || (commit == prevCommit && lsn <= prevLSN) {
			t.Fatalf("line %d: (commit %s, lsn %s) after (%s, %s): not in commit order", i, commit, lsn, prevCommit, prevLSN)
		}
		prevCommit, prevLSN = commit, lsn
	}
}

// TestIntegrationMessagesOutboxKill9LosesNothing: a table-less outbox's
// relay is killed with SIGKILL while it writes a large transaction to the
// sink; more transactions commit (and one rolls back) while it is down.
// After a restart every committed message is there, none that did not
// commit, per key in order of first appearance, with duplicates only of
// what was in flight; the slot's confirmed position, sampled from outside,
// never passed a message the sink did not hold.
func TestIntegrationMessagesOutboxKill9LosesNothing(t *testing.T) {
	t.Parallel()
	url, mo, out, cfg := messagesOutbox(t, "", "relay: {batch_size: 200}")
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	stopSampling := sampleSlot(t, url, mo.Slot, out)

	p := startCDC(t, "run", "--config", cfg)
	mo.EmitSeqTx(t, conn, 100, 13, false)
	if !pgtest.WaitFor(60*time.Second, func() bool { return relaytest.CountLines(out) >= 100 }) {
		t.Fatalf("relay did not get going: %d lines\n%s", relaytest.CountLines(out), p.Stderr.String())
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	lineBytes := st.Size() / 100
	const big = 60000
	mo.EmitSeqTx(t, conn, big, 13, false)
	deadline := time.Now().Add(60 * time.Second)
	for { // as TestIntegrationKill9MidTransactionLosesNothing: watch the size closely
		if st, err := os.Stat(out); err == nil && st.Size() > lineBytes*(100+10000) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay did not get going: %d lines\n%s", relaytest.CountLines(out), p.Stderr.String())
		}
		time.Sleep(time.Millisecond)
	}
	p.Kill9(t)
	killedAt := relaytest.CountLines(out)
	for i := 0; i < 20; i++ {
		mo.EmitSeqTx(t, conn, 1+i*10, 13, i == 7)
	}
	committed := mo.Committed(t, conn)
	p = startCDC(t, "run", "--config", cfg)
	if !pgtest.WaitFor(120*time.Second, func() bool {
		return relaytest.CountLines(out) >= len(committed) && relaytest.AllDelivered(committed, relaytest.ReadLines(t, out))
	}) {
		t.Fatalf("not every committed message was delivered after the restart\n%s", p.Stderr.String())
	}
	r := relaytest.CheckDelivered(t, "out", committed, relaytest.ReadLines(t, out))
	if bad := stopSampling(); len(bad) > 0 {
		t.Fatal(bad[0])
	}
	t.Logf("killed at %d lines; %d committed, %d duplicates", killedAt, r.Committed, r.Duplicates)
	if killedAt >= 100+big {
		t.Fatalf("the kill came after the big transaction was complete (%d lines): the test did not cut it", killedAt)
	}
	if r.Duplicates > big {
		t.Fatalf("%d duplicates: more than the transaction in flight", r.Duplicates)
	}
	p.Stop(t)
}

// sampleSlot samples, every 150 ms until stop is called, the slot's
// confirmed position and then the ids in the file sink; stop returns the
// samples where the slot was confirmed past a message's commit while the
// message was not in the file (invariant 1).
func sampleSlot(t *testing.T, url, slot, out string) (stop func() []string) {
	type sample struct {
		confirmed pglogrepl.LSN
		ids       map[string]bool
	}
	var samples []sample
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		sconn := pgtest.Connect(t, url)
		for {
			select {
			case <-done:
				return
			case <-time.After(150 * time.Millisecond):
			}
			c := relaytest.SlotConfirmed(t, sconn, slot)
			ids := map[string]bool{}
			if b, err := os.ReadFile(out); err == nil {
				for _, line := range bytes.Split(b, []byte("\n")) {
					if i := bytes.Index(line, []byte(`{"id":"`)); i == 0 && len(line) > 43 {
						ids[string(line[7:43])] = true
					}
				}
			}
			samples = append(samples, sample{c, ids})
		}
	}()
	var once sync.Once
	stop = func() []string {
		once.Do(func() { close(done) })
		wg.Wait()
		var bad []string
		lines := relaytest.ReadLines(t, out)
		commits := make([]pglogrepl.LSN, len(lines))
		for i, l := range lines {
			commits[i] = relaytest.ParseLSN(t, l.CommitLSN)
		}
		for _, s := range samples {
			for i, l := range lines {
				if commits[i] < s.confirmed && !s.ids[l.ID] {
					bad = append(bad, fmt.Sprintf("slot confirmed %s while message %s (commit %s) was not in the sink", s.confirmed, l.ID, commits[i]))
					break
				}
			}
		}
		return bad
	}
	t.Cleanup(func() { stop() })
	return stop
}

// TestIntegrationMessagesOutboxBadEnvelopeStopsAtItsLSNAndSkipParksIt:
// under on_invalid: stop, an envelope whose id is not a UUID stops cdc run
// with an error naming the LSN pg_logical_emit_message returned and the
// cdc skip command for it, everything before it delivered; cdc skip parks
// it (the envelope kept in the dead-letter table) and the next run goes on.
// A non-transactional message with the prefix is refused the same way: it
// is not atomic with the application's transaction.
func TestIntegrationMessagesOutboxBadEnvelopeStopsAtItsLSNAndSkipParksIt(t *testing.T) {
	t.Parallel()
	url, mo, out, cfg := messagesOutbox(t, "", "")
	dlq := relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	ctx := context.Background()
	good := relaytest.NewMsg("ok", "k", 1)
	mo.EmitTx(t, conn, good)
	badEnvelope := `{"id":"order-7","type":"bad","payload":{}}`
	var badLSN string
	if err := conn.QueryRow(ctx, "SELECT pg_logical_emit_message(true, $1, $2)::text", mo.Prefix, badEnvelope).Scan(&badLSN); err != nil {
		t.Fatal(err)
	}
	after := relaytest.NewMsg("after", "k", 2)
	mo.EmitTx(t, conn, after)
	nonTx := relaytest.NewMsg("non.transactional", "k", 3)
	var nonTxLSN string
	env := fmt.Sprintf(`{"id":%q,"type":%q,"payload":%s}`, nonTx.ID, nonTx.Type, nonTx.Payload)
	if err := conn.QueryRow(ctx, "SELECT pg_logical_emit_message(false, $1, $2)::text", mo.Prefix, env).Scan(&nonTxLSN); err != nil {
		t.Fatal(err)
	}
	last := relaytest.NewMsg("last", "k", 4)
	mo.EmitTx(t, conn, last)

	stopsAt := func(lsn, why string, delivered ...relaytest.Msg) {
		t.Helper()
		p := startCDC(t, "run", "--config", cfg)
		if code := p.Wait(60 * time.Second); code != 1 {
			t.Fatalf("exit %d, want 1\n%s", code, p.Stderr.String())
		}
		msg := p.Stderr.String()
		m := regexp.MustCompile(`cdc skip --config \S+ --lsn (\S+)`).FindStringSubmatch(msg)
		if m == nil || m[1] != lsn || !strings.Contains(msg, "at LSN "+lsn) || !strings.Contains(msg, why) {
			t.Fatalf("the error does not name LSN %s (%s) and the cdc skip for it:\n%s", lsn, why, msg)
		}
		relaytest.WaitAllDelivered(t, out, delivered, 10*time.Second, nil)
		if lines := relaytest.ReadLines(t, out); len(lines) > len(delivered)*2 {
			t.Fatalf("delivered %d lines, want those before LSN %s", len(lines), lsn)
		}
		var b bytes.Buffer
		if code := run([]string{"skip", "--config", cfg, "--lsn", lsn}, &b, &b); code != 0 {
			t.Fatalf("cdc skip --lsn %s: exit %d: %s", lsn, code, b.String())
		}
	}
	stopsAt(badLSN, `is not a UUID`, good)
	var rowData string
	if err := conn.QueryRow(ctx, "SELECT row_data->>'envelope' FROM "+dlq+" WHERE slot = $1 AND lsn = $2::pg_lsn", mo.Slot, badLSN).Scan(&rowData); err != nil || rowData != badEnvelope {
		t.Fatalf("parked envelope %q (%v), want %q", rowData, err, badEnvelope)
	}
	stopsAt(nonTxLSN, "non-transactional", good, after)
	p := startCDC(t, "run", "--config", cfg)
	lines := relaytest.WaitAllDelivered(t, out, []relaytest.Msg{good, after, last}, 30*time.Second, p.Stderr.String)
	for _, l := range lines {
		if l.Type == "bad" || l.ID == nonTx.ID {
			t.Fatalf("a refused message was delivered: %+v", l)
		}
	}
	p.Stop(t)
}
