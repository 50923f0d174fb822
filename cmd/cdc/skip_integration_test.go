package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationSkipParksTheOneRowTheRelayStopsAt: under on_invalid: stop
// a bad row stops `cdc run` every time; its error gives the slot's own
// confirmed position and the way out (cdc skip, on_invalid: dead_letter).
// `cdc skip` refuses any other LSN and a slot in use, parks exactly that
// row, and the next run goes past it and delivers what follows.
func TestIntegrationSkipParksTheOneRowTheRelayStopsAt(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	pgtest.Exec(t, url, "ALTER TABLE "+ob.Table+" ALTER COLUMN payload TYPE text")
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "")
	dlq := relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	ctx := context.Background()

	good := relaytest.NewMsg("ok", "k", 1)
	ob.InsertTx(t, conn, good)
	bad := relaytest.NewMsg("bad", "k", 2)
	if _, err := conn.Exec(ctx, "INSERT INTO "+ob.Table+" (id, type, key, payload) VALUES ($1, 'bad', 'k', 'not json')", bad.ID); err != nil {
		t.Fatal(err)
	}
	after := relaytest.NewMsg("after", "k", 3)
	ob.InsertTx(t, conn, after)

	var badLSN string
	for attempt := range 2 { // a restart stops at the same row
		p := startCDC(t, "run", "--config", cfg)
		if code := p.Wait(60 * time.Second); code != 1 {
			t.Fatalf("run %d: exit %d, want 1\n%s", attempt, code, p.Stderr.String())
		}
		msg := p.Stderr.String()
		m := regexp.MustCompile(`cdc skip --config \S+ --lsn (\S+)`).FindStringSubmatch(msg)
		if m == nil || !strings.Contains(msg, bad.ID) || !strings.Contains(msg, "on_invalid: dead_letter") {
			t.Fatalf("run %d: the error does not name the row and the ways past it:\n%s", attempt, msg)
		}
		badLSN = m[1]
		slotAt := relaytest.SlotConfirmed(t, conn, ob.Slot)
		if !strings.Contains(msg, "is confirmed up to "+slotAt.String()+".") {
			t.Fatalf("run %d: the error does not give the slot's confirmed position %s:\n%s", attempt, slotAt, msg)
		}
	}
	if lines := relaytest.ReadLines(t, out); len(lines) != 1 || lines[0].ID != good.ID {
		t.Fatalf("delivered %+v, want only the row before the bad one", lines)
	}

	skip := func(lsn string) (int, string) {
		var b bytes.Buffer
		code := run([]string{"skip", "--config", cfg, "--lsn", lsn}, &b, &b)
		return code, b.String()
	}
	if code, msg := skip("0/1"); code != 1 || !strings.Contains(msg, "at LSN "+badLSN) {
		t.Fatalf("skip of another LSN: exit %d: %s", code, msg)
	}
	// Not while a relay holds the slot.
	holder, err := holdSlot(t, url, ob)
	if err != nil {
		t.Fatal(err)
	}
	if code, msg := skip(badLSN); code != 1 || !strings.Contains(msg, "stop every relay") {
		t.Fatalf("skip while the slot is in use: exit %d: %s", code, msg)
	}
	holder.Close(ctx)
	pgtest.WaitFor(10*time.Second, func() bool {
		var active bool
		conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", ob.Slot).Scan(&active)
		return !active
	})

	if code, msg := skip(badLSN); code != 0 || !strings.Contains(msg, bad.ID) {
		t.Fatalf("skip: exit %d: %s", code, msg)
	}
	var parkedID, errText string
	if err := conn.QueryRow(ctx, "SELECT message_id, error FROM "+dlq+" WHERE slot = $1 AND lsn = $2::pg_lsn", ob.Slot, badLSN).Scan(&parkedID, &errText); err != nil {
		t.Fatalf("the skipped row is not in the dead-letter table: %v", err)
	}
	if parkedID != bad.ID || !strings.Contains(errText, "cdc skip") || !strings.Contains(errText, "not valid JSON") {
		t.Fatalf("parked %s with error %q", parkedID, errText)
	}
	p := startCDC(t, "run", "--config", cfg)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{good, after}, 30*time.Second, p.Stderr.String)
	for _, l := range relaytest.ReadLines(t, out) {
		if l.ID == bad.ID {
			t.Fatal("the skipped row was delivered")
		}
	}
}

// TestIntegrationSkipGoesRowByRowThroughOneTransaction: two bad rows in
// one transaction. The relay stops at the first; once it is skipped, at
// the second (the slot stays before the transaction, so the first is
// still pending): cdc skip must take the second then, passing over the
// row parked already, as the relay does.
func TestIntegrationSkipGoesRowByRowThroughOneTransaction(t *testing.T) {
	t.Parallel()
	url, ob, out, cfg := fileOutbox(t, "")
	pgtest.Exec(t, url, "ALTER TABLE "+ob.Table+" ALTER COLUMN payload TYPE text")
	relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	ctx := context.Background()
	bad1, mid, bad2 := relaytest.NewMsg("bad", "k", 1), relaytest.NewMsg("ok", "k", 2), relaytest.NewMsg("bad", "k", 3)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	insertBad := func(m relaytest.Msg) {
		if _, err := tx.Exec(ctx, "INSERT INTO "+ob.Table+" (id, type, key, payload) VALUES ($1, 'bad', 'k', 'not json')", m.ID); err != nil {
			t.Fatal(err)
		}
	}
	insertBad(bad1)
	if err := ob.Insert(ctx, tx, mid); err != nil {
		t.Fatal(err)
	}
	insertBad(bad2)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	after := relaytest.NewMsg("after", "k", 4)
	ob.InsertTx(t, conn, after)

	lsnRE := regexp.MustCompile(`cdc skip --config \S+ --lsn (\S+)`)
	for _, bad := range []relaytest.Msg{bad1, bad2} {
		p := startCDC(t, "run", "--config", cfg)
		if code := p.Wait(60 * time.Second); code != 1 || !strings.Contains(p.Stderr.String(), bad.ID) {
			t.Fatalf("run: exit %d, want 1 stopping at %s\n%s", code, bad.ID, p.Stderr.String())
		}
		m := lsnRE.FindStringSubmatch(p.Stderr.String())
		if m == nil {
			t.Fatalf("no cdc skip line:\n%s", p.Stderr.String())
		}
		var b bytes.Buffer
		if code := run([]string{"skip", "--config", cfg, "--lsn", m[1]}, &b, &b); code != 0 || !strings.Contains(b.String(), bad.ID) {
			t.Fatalf("skip of %s: exit %d: %s", bad.ID, code, b.String())
		}
	}
	p := startCDC(t, "run", "--config", cfg)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{mid, after}, 30*time.Second, p.Stderr.String)
}
