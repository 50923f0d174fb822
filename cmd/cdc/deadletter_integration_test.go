package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationDeadLetterListShowResendDrop: a relay with on_refused and
// on_invalid: dead_letter parks a message its webhook refuses (400) and a
// row with an empty type. cdc dead-letter list (text and --json) and show
// print them; resend delivers the refused message to the webhook with the
// same id and the same body bytes it refused, and marks it resent; the
// unmappable row fails to resend until its row_data is fixed, then goes,
// with its id and LSN, to every routed sink; drop deletes; a table
// without resent_at is upgraded by its owner's cdc dead-letter.
func TestIntegrationDeadLetterListShowResendDrop(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	hook, hookURL := newRecHook(t)
	hook.poison.Store(true)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: hook, kind: webhook, url: %q, timeout: 5s}\n  - {name: out, kind: file, path: %s}", hookURL, out),
		"relay: {on_refused: dead_letter, on_invalid: dead_letter, refused_attempts: 1}")
	dlq := relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	ctx := context.Background()

	ok1, ok2 := relaytest.NewMsg("ok", "k", 1), relaytest.NewMsg("ok", "k", 3)
	poison := relaytest.NewMsg("p", "k", 2)
	poison.Payload = `{"poison": true, "b": [1, 2], "a": "x"}`
	bad := relaytest.NewMsg("bad", "k", 4)
	ob.InsertTx(t, conn, ok1, poison)
	if _, err := conn.Exec(ctx, "INSERT INTO "+ob.Table+" (id, type, key, payload) VALUES ($1, '', 'k', '{\"n\": 4}')", bad.ID); err != nil {
		t.Fatal(err)
	}
	ob.InsertTx(t, conn, ok2)
	relay := startCDC(t, "run", "--config", cfg)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{ok1, poison, ok2}, 60*time.Second, relay.Stderr.String)
	if !pgtest.WaitFor(30*time.Second, func() bool { return len(hook.got()) == 2 }) {
		t.Fatalf("the webhook got %v, want %s and %s\n%s", hook.got(), ok1.ID, ok2.ID, relay.Stderr.String())
	}
	relay.Stop(t)

	// list and show.
	code, stdout, stderr := cdc(t, nil, "dead-letter", "--config", cfg, "list")
	if code != 0 || !strings.Contains(stdout, "ID") || !strings.Contains(stdout, poison.ID) || !strings.Contains(stdout, bad.ID) ||
		!strings.Contains(stdout, " hook ") || !strings.Contains(stdout, "sink -:") {
		t.Fatalf("dead-letter list: exit %d\n%s%s", code, stdout, stderr)
	}
	rows := listParked(t, cfg)
	if len(rows) != 2 || *rows[0].ID != poison.ID || rows[0].Sink != "hook" || *rows[1].ID != bad.ID || rows[1].Sink != "" ||
		rows[0].ResentAt != nil || !strings.Contains(rows[0].Error, "400") || !strings.Contains(rows[1].Error, "type is NULL or empty") {
		t.Fatalf("dead-letter list --json: %+v", rows)
	}
	code, stdout, _ = cdc(t, nil, "dead-letter", "--config", cfg, "show", poison.ID)
	if code != 0 || !strings.Contains(stdout, "lsn:         "+rows[0].LSN) || !strings.Contains(stdout, "\"poison\": true") || !strings.Contains(stdout, rows[0].Error) {
		t.Fatalf("dead-letter show: exit %d\n%s", code, stdout)
	}

	// resend of the refused message: same id, same bytes, to hook only.
	refusedBody := hook.bodiesOf(poison.ID)[0]
	code, stdout, _ = cdc(t, nil, "dead-letter", "--config", cfg, "resend", poison.ID)
	if code != 1 || !strings.Contains(stdout, "failed  "+poison.ID) {
		t.Fatalf("resend while the webhook still refuses: exit %d, want 1 reporting it\n%s", code, stdout)
	}
	hook.poison.Store(false)
	code, stdout, stderr = cdc(t, nil, "dead-letter", "--config", cfg, "resend", poison.ID)
	if code != 0 || !strings.Contains(stdout, "resent  "+poison.ID) {
		t.Fatalf("resend: exit %d\n%s%s", code, stdout, stderr)
	}
	bodies := hook.bodiesOf(poison.ID)
	if got := hook.got(); got[len(got)-1] != poison.ID || bodies[len(bodies)-1] != refusedBody {
		t.Fatalf("resent %v with body %q, want %s with the body refused: %q", got, bodies[len(bodies)-1], poison.ID, refusedBody)
	}
	if n := len(relaytest.ReadLines(t, out)); n != 3 {
		t.Fatalf("the resend of a message hook refused went to out too: %d lines", n)
	}
	if rows = listParked(t, cfg); rows[0].ResentAt == nil || rows[1].ResentAt != nil {
		t.Fatalf("after resend: %+v, want the first marked resent only", rows)
	}

	// The unmappable row: refused until fixed, then to every routed sink.
	code, stdout, _ = cdc(t, nil, "dead-letter", "--config", cfg, "resend", "--all")
	if code != 1 || !strings.Contains(stdout, "failed  "+bad.ID) || !strings.Contains(stdout, "still cannot be mapped") || strings.Contains(stdout, poison.ID) {
		t.Fatalf("resend --all of the unfixed row: exit %d, want 1 and only it reported\n%s", code, stdout)
	}
	pgtest.Exec(t, url, fmt.Sprintf(`UPDATE %s SET row_data = jsonb_set(row_data, '{type}', '"fixed"') WHERE message_id = '%s'`, dlq, bad.ID))
	code, stdout, stderr = cdc(t, nil, "dead-letter", "--config", cfg, "resend", "--all")
	if code != 0 || !strings.Contains(stdout, "resent  "+bad.ID) || !strings.Contains(stdout, "to hook, out") {
		t.Fatalf("resend --all of the fixed row: exit %d\n%s%s", code, stdout, stderr)
	}
	lines := relaytest.ReadLines(t, out)
	last := lines[len(lines)-1]
	if last.ID != bad.ID || last.Type != "fixed" || last.LSN != rows[1].LSN || !slices.Contains(hook.got(), bad.ID) {
		t.Fatalf("the fixed row went out as %+v (webhook %v), want id %s, type fixed, lsn %s to both", last, hook.got(), bad.ID, rows[1].LSN)
	}

	// drop.
	code, stdout, _ = cdc(t, nil, "dead-letter", "--config", cfg, "drop", poison.ID)
	if code != 0 || !strings.Contains(stdout, "dropped "+poison.ID) {
		t.Fatalf("drop: exit %d\n%s", code, stdout)
	}
	if rows = listParked(t, cfg); len(rows) != 1 || *rows[0].ID != bad.ID {
		t.Fatalf("after drop: %+v", rows)
	}
	if code, _, stderr = cdc(t, nil, "dead-letter", "--config", cfg, "drop", poison.ID); code != 1 || !strings.Contains(stderr, "no parked message") {
		t.Fatalf("drop of a dropped id: exit %d, want 1\n%s", code, stderr)
	}
	code, stdout, _ = cdc(t, nil, "dead-letter", "--config", cfg, "drop", rows[0].LSN)
	if code != 0 || !strings.Contains(stdout, "dropped "+bad.ID) {
		t.Fatalf("drop by lsn: exit %d\n%s", code, stdout)
	}

	// A table from before resent_at: cdc dead-letter list, even as its
	// owner, changes nothing (a read runs no DDL) and says to run cdc
	// init, which adds it.
	pgtest.Exec(t, url, "ALTER TABLE "+dlq+" DROP COLUMN resent_at")
	if code, _, stderr = cdc(t, nil, "dead-letter", "--config", cfg, "list"); code != 1 || !strings.Contains(stderr, "run 'cdc init'") {
		t.Fatalf("list without resent_at, as the table's owner: exit %d, want 1 naming cdc init\n%s", code, stderr)
	}
	var upgraded bool
	if err := pgtest.Connect(t, url).QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attname = 'resent_at' AND NOT attisdropped)`, dlq).Scan(&upgraded); err != nil || upgraded {
		t.Fatalf("cdc dead-letter list added resent_at (%v): a list ran DDL", err)
	}
	cdcInit(t, cfg)
	if rows = listParked(t, cfg); len(rows) != 0 {
		t.Fatalf("after cdc init: %+v", rows)
	}
}

// TestIntegrationDeadLetterResendOfATableLessOutboxDecodesTheEnvelope: a
// table-less outbox parks a bad envelope (on_invalid: dead_letter) and
// then a message its webhook refuses (on_refused: dead_letter). resend
// --all decodes the parked envelope as an envelope (no outbox table is
// read): it fails, reported with the envelope's error, and the refused
// message after it is resent all the same. Once its row_data is fixed, the
// envelope goes, with its id and parked LSN, to every routed sink.
func TestIntegrationDeadLetterResendOfATableLessOutboxDecodesTheEnvelope(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	mo := relaytest.NewMessagesOutbox(t, url)
	hook, hookURL := newRecHook(t)
	hook.poison.Store(true)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := mo.Config(t, fmt.Sprintf("  - {name: hook, kind: webhook, url: %q, timeout: 5s}\n  - {name: out, kind: file, path: %s}", hookURL, out), "",
		"relay: {on_refused: dead_letter, on_invalid: dead_letter, refused_attempts: 1}")
	dlq := relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	ctx := context.Background()

	ok1, ok2 := relaytest.NewMsg("ok", "k", 1), relaytest.NewMsg("ok", "k", 3)
	bad := relaytest.NewMsg("fixed", "k", 2)
	poison := relaytest.NewMsg("p", "k", 4)
	poison.Payload = `{"poison": true}`
	mo.EmitTx(t, conn, ok1)
	var badLSN string
	if err := conn.QueryRow(ctx, "SELECT pg_logical_emit_message(true, $1, $2)::text", mo.Prefix,
		fmt.Sprintf(`{"id":%q,"type":"","payload":%s}`, bad.ID, bad.Payload)).Scan(&badLSN); err != nil {
		t.Fatal(err)
	}
	mo.EmitTx(t, conn, poison)
	mo.EmitTx(t, conn, ok2)
	relay := startCDC(t, "run", "--config", cfg)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{ok1, poison, ok2}, 60*time.Second, relay.Stderr.String)
	pgtest.Await(t, 30*time.Second, "the webhook's two messages", func() bool { return len(hook.got()) == 2 })
	pgtest.Await(t, 30*time.Second, "two parked rows", func() bool { return len(listParked(t, cfg)) == 2 })
	relay.Stop(t)
	rows := listParked(t, cfg)
	if *rows[0].ID != bad.ID || rows[0].Sink != "" || rows[0].LSN != badLSN || *rows[1].ID != poison.ID || rows[1].Sink != "hook" {
		t.Fatalf("parked %+v, want the bad envelope (sink -, lsn %s) then the refused message", rows, badLSN)
	}

	hook.poison.Store(false)
	code, stdout, stderr := cdc(t, nil, "dead-letter", "--config", cfg, "resend", "--all")
	if code != 1 || !strings.Contains(stdout, "failed  "+bad.ID) || !strings.Contains(stdout, "still cannot be mapped") ||
		!strings.Contains(stdout, "type") || !strings.Contains(stdout, "resent  "+poison.ID) {
		t.Fatalf("resend --all: exit %d, want 1, the envelope's failure reported and the refused message resent:\n%s%s", code, stdout, stderr)
	}
	if got := hook.got(); got[len(got)-1] != poison.ID {
		t.Fatalf("the webhook got %v, want %s last", got, poison.ID)
	}

	pgtest.Exec(t, url, fmt.Sprintf(`UPDATE %s SET row_data = jsonb_build_object('envelope', '{"id":"%s","type":"fixed","key":"k","payload":%s}') WHERE lsn = '%s'`,
		dlq, bad.ID, bad.Payload, badLSN))
	code, stdout, stderr = cdc(t, nil, "dead-letter", "--config", cfg, "resend", "--all")
	if code != 0 || !strings.Contains(stdout, "resent  "+bad.ID) || !strings.Contains(stdout, "to hook, out") {
		t.Fatalf("resend --all of the fixed envelope: exit %d\n%s%s", code, stdout, stderr)
	}
	lines := relaytest.ReadLines(t, out)
	last := lines[len(lines)-1]
	if last.ID != bad.ID || last.Type != "fixed" || keyOf(last) != "k" || string(last.Payload) != bad.Payload || last.LSN != badLSN ||
		!slices.Contains(hook.got(), bad.ID) {
		t.Fatalf("the fixed envelope went out as %+v (webhook %v), want id %s, type fixed, payload %s, lsn %s to both", last, hook.got(), bad.ID, bad.Payload, badLSN)
	}
}
