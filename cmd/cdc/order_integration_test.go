package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

// Issue 32, part 3: what publishes rows read from the outbox table (cdc
// recover, cdc resync, cdc replay, a gap fill) keeps the order a key's
// rows were inserted in, within one transaction too (invariant 2,
// docs/design.md "Row order from the table"). The rows of one transaction
// share created_at (now() is the transaction's start), so time order
// cannot tell them apart; with random ids, id order is random.

// keyTx commits, in one transaction, n rows of key k with random (UUIDv4)
// ids, one INSERT each as the README's example writes them, numbered
// from first in their payload ({"n": …}). The ids are sorted descending,
// so that an order by id is the reverse of the insertion order, whatever
// the draw. table is the outbox table; cols, when set, the column list of
// (id, type, key, payload).
func keyTx(t *testing.T, conn *pgx.Conn, table, cols string, first, n int) []relaytest.Msg {
	t.Helper()
	if cols == "" {
		cols = "id, type, key, payload"
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid.NewString() // version 4: random
	}
	slices.Sort(ids)
	slices.Reverse(ids)
	msgs := make([]relaytest.Msg, n)
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for i := range msgs {
			msgs[i] = relaytest.Msg{ID: ids[i], Type: "t", Key: "k", Payload: fmt.Sprintf(`{"n": %d}`, first+i)}
			if _, err := tx.Exec(ctx, "INSERT INTO "+table+" ("+cols+") VALUES ($1, 't', 'k', $2)", ids[i], msgs[i].Payload); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("inserting: %v", err)
	}
	return msgs
}

// firstDeliveries returns, for the ids of want, the n of each in the
// order of their first delivery in lines.
func firstDeliveries(t *testing.T, lines []relaytest.Line, want []relaytest.Msg) []int {
	t.Helper()
	of := map[string]bool{}
	for _, m := range want {
		of[m.ID] = true
	}
	var got []int
	for _, l := range lines {
		if !of[l.ID] {
			continue
		}
		delete(of, l.ID)
		var p struct{ N int }
		if err := json.Unmarshal(l.Payload, &p); err != nil {
			t.Fatalf("payload of %s: %v: %s", l.ID, err, l.Payload)
		}
		got = append(got, p.N)
	}
	return got
}

// checkKeyOrder fails unless every message of want was delivered and
// their first deliveries come in want's order (n ascending).
func checkKeyOrder(t *testing.T, what string, lines []relaytest.Line, want []relaytest.Msg) {
	t.Helper()
	got := firstDeliveries(t, lines, want)
	if len(got) != len(want) || !slices.IsSorted(got) {
		t.Errorf("%s: key k's rows first delivered in the order %v, want 1..%d in the order they were inserted", what, got, len(want))
	}
}

// TestIntegrationRecoverKeepsTheOrderOfAKeyWithinATransaction is the
// issue's repro: on the default table (sql/outbox.sql), one transaction of
// 8 rows of key k with random ids, then another of 4, the slot
// invalidated, cdc recover, cdc run: the first deliveries come in the
// order the rows were inserted (the table's seq), not in id order.
func TestIntegrationRecoverKeepsTheOrderOfAKeyWithinATransaction(t *testing.T) {
	url, ob, out, cfg := lostSlotOutbox(t, "")
	conn := pgtest.Connect(t, url)
	p := startCDC(t, "run", "--config", cfg)
	first := relaytest.NewMsg("t", "other", 0)
	ob.InsertTx(t, conn, first)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{first}, 30*time.Second, p.Stderr.String)
	pgtest.Await(t, 30*time.Second, "the sink's commit time saved", func() bool {
		var n int
		conn.QueryRow(context.Background(), "SELECT count(*) FROM public.walpost_sink_progress WHERE slot = $1 AND commit_time IS NOT NULL", ob.Slot).Scan(&n)
		return n == 1
	})
	p.Stop(t)
	k := append(keyTx(t, conn, ob.Table, "", 1, 8), keyTx(t, conn, ob.Table, "", 9, 4)...)
	invalidate(t, url, ob.Slot, nil)
	recoverAndDeliver(t, cfg, out, append([]relaytest.Msg{first}, k...))
	checkKeyOrder(t, "cdc recover", relaytest.ReadLines(t, out), k)
}

// TestIntegrationResyncKeepsTheOrderOfAKeyWithinATransaction: cdc resync
// publishes a transaction's rows of one key in the order they were
// inserted (the default table's seq), whatever their ids.
func TestIntegrationResyncKeepsTheOrderOfAKeyWithinATransaction(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "")
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	k := keyTx(t, conn, ob.Table, "", 1, 8)
	code, stdout, stderr := cdc(t, nil, "resync", "--config", cfg, "--since", "1h")
	if code != 0 {
		t.Fatalf("cdc resync --since 1h: exit %d\n%s%s", code, stdout, stderr)
	}
	checkKeyOrder(t, "cdc resync", relaytest.ReadLines(t, out), k)
}

// TestIntegrationReplayKeepsTheOrderOfAKeyWithinATransaction: cdc replay
// publishes a transaction's rows of one key in the order they were
// inserted: on the default table by its seq; on a table of its own by the
// column columns.order names (here with an application-set time that all
// rows share, as an EF Core outbox may); a columns.order the table lacks,
// of a type that orders nothing, or that may be NULL (such a row would
// have no place in the order, and never be published) is an error naming
// columns.order, of cdc replay and of cdc run before it streams.
func TestIntegrationReplayKeepsTheOrderOfAKeyWithinATransaction(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	conn := pgtest.Connect(t, url)
	t.Run("default table", func(t *testing.T) {
		ob := relaytest.NewOutbox(t, url)
		out := filepath.Join(t.TempDir(), "out.jsonl")
		cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "")
		k := keyTx(t, conn, ob.Table, "", 1, 8)
		if code, _, stderr := cdc(t, nil, "replay", "--config", cfg, "--since", "1h"); code != 0 {
			t.Fatalf("cdc replay --since 1h: exit %d\n%s", code, stderr)
		}
		checkKeyOrder(t, "cdc replay", relaytest.ReadLines(t, out), k)
	})
	t.Run("columns.order", func(t *testing.T) {
		ob := relaytest.NewOutbox(t, url)
		pgtest.Exec(t, url, "DROP TABLE "+ob.Table, "CREATE TABLE "+ob.Table+
			` ("Id" uuid PRIMARY KEY, "Type" text NOT NULL, "Key" text, "Payload" jsonb NOT NULL, "OccurredOnUtc" timestamptz NOT NULL DEFAULT '2026-01-01 00:00:00+00', "Ord" bigserial, "Loose" bigint, "Note" text NOT NULL DEFAULT '')`)
		out := filepath.Join(t.TempDir(), "out.jsonl")
		columns := `columns: {id: Id, type: Type, key: Key, payload: Payload, headers: "-", time: OccurredOnUtc%s}`
		cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), fmt.Sprintf(columns, ", order: Ord"))
		k := keyTx(t, conn, ob.Table, `"Id", "Type", "Key", "Payload"`, 1, 8)
		if code, _, stderr := cdc(t, nil, "replay", "--config", cfg, "--from-id", k[0].ID, "--to-id", k[7].ID); code != 0 {
			t.Fatalf("cdc replay with columns.order: exit %d\n%s", code, stderr)
		}
		checkKeyOrder(t, "cdc replay with columns.order", relaytest.ReadLines(t, out), k)

		for _, bad := range []string{", order: Missing", ", order: Note", ", order: Loose", ", order: Type"} {
			cfg := ob.Config(t, "  - {name: out, kind: discard}", fmt.Sprintf(columns, bad))
			for _, args := range [][]string{{"replay", "--since", "1h"}, {"run"}} {
				if code, _, stderr := cdc(t, nil, append(args, "--config", cfg)...); code == 0 || !strings.Contains(stderr, "columns.order") {
					t.Errorf("cdc %s with %s: exit %d, want an error naming columns.order\n%s", args[0], bad, code, stderr)
				}
			}
		}
	})
}

// TestIntegrationGapFillKeepsTheOrderOfAKeyWithinATransaction: a
// transaction's rows written while the publication did not publish the
// outbox are relayed from the table by the next cdc run (a gap fill) in
// the order they were inserted, whatever their ids.
func TestIntegrationGapFillKeepsTheOrderOfAKeyWithinATransaction(t *testing.T) {
	t.Parallel()
	r := newPubRelay(t, pgtest.URL(t))
	p := startCDC(t, "run", "--config", r.cfg)
	first := relaytest.NewMsg("first", "other", 0)
	r.ob.InsertTx(t, r.conn, first)
	relaytest.WaitAllDelivered(t, r.out, []relaytest.Msg{first}, 30*time.Second, p.Stderr.String)
	p.Stop(t)
	pgtest.Exec(t, r.url, "ALTER PUBLICATION "+r.ob.Publication+" DROP TABLE "+r.ob.Table)
	k := keyTx(t, r.conn, r.ob.Table, "", 1, 8)
	pgtest.Exec(t, r.url, "ALTER PUBLICATION "+r.ob.Publication+" ADD TABLE "+r.ob.Table)
	p = startCDC(t, "run", "--config", r.cfg)
	relaytest.WaitAllDelivered(t, r.out, append([]relaytest.Msg{first}, k...), 30*time.Second, p.Stderr.String)
	p.Stop(t)
	checkKeyOrder(t, "the gap fill", relaytest.ReadLines(t, r.out), k)
}

// TestIntegrationRecoverOfATableWithoutSeqKeepsTheOrderOfTransactions: a
// default table made before it had seq (no order column, random ids) is
// recovered in created_at, id order: a key's transactions come in the
// order they started, not in id order (before, recover ordered this table
// by id alone). Within one transaction such a table cannot tell the order
// (docs/design.md, "Row order from the table"); each transaction here has
// one row of key k.
func TestIntegrationRecoverOfATableWithoutSeqKeepsTheOrderOfTransactions(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	pgtest.Exec(t, url, "ALTER TABLE "+ob.Table+" DROP COLUMN seq")
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "")
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	var k []relaytest.Msg
	for i := range 4 {
		k = append(k, keyTx(t, conn, ob.Table, "", i+1, 1)...)
	}
	// Ids descending across the transactions too.
	ids := []string{"ffffffff-0000-4000-8000-000000000000", "bbbbbbbb-0000-4000-8000-000000000000", "77777777-0000-4000-8000-000000000000", "33333333-0000-4000-8000-000000000000"}
	for i := range k {
		pgtest.Exec(t, url, fmt.Sprintf("UPDATE %s SET id = '%s' WHERE id = '%s'", ob.Table, ids[i], k[i].ID))
		k[i].ID = ids[i]
	}
	pgtest.DropSlot(t, url, ob.Slot)
	if code, stdout, stderr := cdc(t, nil, "recover", "--config", cfg, "--since", "1h"); code != 0 {
		t.Fatalf("cdc recover --since 1h: exit %d\n%s%s", code, stdout, stderr)
	}
	p := startCDC(t, "run", "--config", cfg)
	relaytest.WaitAllDelivered(t, out, k, 30*time.Second, p.Stderr.String)
	p.Stop(t)
	checkKeyOrder(t, "cdc recover of a table without seq", relaytest.ReadLines(t, out), k)
}
