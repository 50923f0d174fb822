package main

import (
	"context"
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

// giantURL is the database of the giant-message tests: a cluster of their
// own, since every WAL sender of a cluster reads every logical message
// written in it, and a gigabyte read by each relay of the shared cluster
// slows the other tests' relays by a minute.
func giantURL(t *testing.T) string {
	return pgtest.NamedCluster(t, "giant", pgtest.Options{}).URL("postgres")
}

// podLimit is the memory limit of the shipped Kubernetes manifest: the
// relay must stay under it whatever another role emits.
const podLimit = 256 << 20

// giantSizes are the logical messages the attacker emits: 200 MB and
// 1 GB (10^9 bytes: PostgreSQL's largest WAL record is 1020 MiB), or
// WALPOST_GIANT_MB alone.
func giantSizes() []int {
	if s := os.Getenv("WALPOST_GIANT_MB"); s != "" {
		var mb int
		fmt.Sscan(s, &mb)
		return []int{mb * 1_000_000}
	}
	return []int{200_000_000, 1_000_000_000}
}

// asNobody returns a connection of a new role that may only log in.
func asNobody(t *testing.T, url string) *pgx.Conn {
	role := pgtest.Name(t, "nobody")
	pgtest.Exec(t, url, "CREATE ROLE "+role+" LOGIN PASSWORD 'x'")
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP ROLE IF EXISTS "+role) })
	return pgtest.Connect(t, strings.Replace(url, "postgres@", role+":x@", 1))
}

// emitReadOnly emits logical messages in one READ ONLY transaction of conn:
// each of content repeat('a', size), with its prefix and transactional flag.
func emitReadOnly(t *testing.T, conn *pgx.Conn, msgs ...giant) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		for _, m := range msgs {
			if _, err := tx.Exec(ctx, "SELECT pg_logical_emit_message($1, $2, repeat('a', $3))", m.transactional, m.prefix, m.size); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("emitting as a role without privileges: %v", err)
	}
}

type giant struct {
	transactional bool
	prefix        string
	size          int
}

// TestIntegrationGiantMessagesFromAnyRoleCostTheRelayNoMemory: a role that
// may only log in emits, in READ ONLY transactions, logical messages of
// 200 MB (non-transactional and transactional, of another prefix and of
// the relay's own adopt prefix, from a transaction no cdc init --adopt
// recorded) and 1 GB (non-transactional). The relay, with the default
// postgres.max_message_bytes (64 MiB), reads past each without holding
// it: its peak RSS stays under the pod's 256 MiB, it keeps running, and
// the rows written after them are delivered. An outbox row of 80 MB, over
// the limit, is a bad row: under relay.on_invalid: dead_letter it is
// parked by position with its id and small columns, the next row is
// delivered, and cdc dead-letter resend refuses it (its values were never
// read) naming cdc replay --id. Before postgres.max_message_bytes, the
// 200 MB message alone took the relay to 404 MiB.
func TestIntegrationGiantMessagesFromAnyRoleCostTheRelayNoMemory(t *testing.T) {
	t.Parallel()
	url := giantURL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "relay: {on_invalid: dead_letter}")
	relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	p := startCDC(t, "run", "--config", cfg)
	if !pgtest.WaitFor(30*time.Second, func() bool { return strings.Contains(p.Stderr.String(), `"message":"streaming"`) }) {
		t.Fatalf("the relay did not start streaming:\n%s", p.Stderr.String())
	}
	conn := pgtest.Connect(t, url)
	nobody := asNobody(t, url)

	var want []relaytest.Msg
	for i, size := range giantSizes() {
		emitReadOnly(t, nobody, giant{false, "attack", size})
		if i == 0 {
			// Transactional ones too, once: the server spills them to
			// disk before it sends them, which at 1 GB takes minutes.
			emitReadOnly(t, nobody, giant{true, "attack", size}, giant{true, "walpost.adopt." + ob.Slot, size})
		}
		m := relaytest.NewMsg("after.giant", "k", i)
		ob.InsertTx(t, conn, m)
		want = append(want, m)
		relaytest.WaitAllDelivered(t, out, want, 180*time.Second, p.Stderr.String)
		if p.Exited() {
			t.Fatalf("the relay exited:\n%s", p.Logs())
		}
		t.Logf("%d MB messages: relay peak RSS %.1f MiB", size/1_000_000, float64(peakRSS(p.Cmd.Process.Pid))/(1<<20))
	}

	big := relaytest.NewMsg("too.big", "big-key", 0)
	if _, err := conn.Exec(context.Background(), fmt.Sprintf("INSERT INTO %s (id, type, key, payload) VALUES ($1, $2, $3, jsonb_build_object('pad', repeat('x', 80000000)))", ob.Table),
		big.ID, big.Type, big.Key); err != nil {
		t.Fatal(err)
	}
	next := relaytest.NewMsg("after.big.row", "k", 9)
	ob.InsertTx(t, conn, next)
	want = append(want, next)
	lines := relaytest.WaitAllDelivered(t, out, want, 120*time.Second, p.Stderr.String)
	if peak := peakRSS(p.Cmd.Process.Pid); peak > podLimit {
		t.Fatalf("peak RSS %.1f MiB, over the pod's %d MiB", float64(peak)/(1<<20), podLimit>>20)
	} else {
		t.Logf("after the 80 MB row: relay peak RSS %.1f MiB", float64(peak)/(1<<20))
	}
	p.Stop(t)
	if len(lines) != len(want) {
		t.Fatalf("the sink got %d messages, want %d (no giant message, no oversized row): %+v", len(lines), len(want), lines)
	}
	parked := listParked(t, cfg)
	if len(parked) != 1 || parked[0].ID == nil || *parked[0].ID != big.ID || !strings.Contains(parked[0].Error, "postgres.max_message_bytes") ||
		!strings.Contains(string(parked[0].RowData), `"big-key"`) {
		t.Fatalf("parked %+v, want the 80 MB row, by id, with its key and the limit named", parked)
	}
	code, stdout, stderr := cdc(t, nil, "dead-letter", "--config", cfg, "resend", "--all")
	if code != 1 || !strings.Contains(stdout+stderr, "cdc replay --id "+big.ID) {
		t.Fatalf("resend of the oversized row: exit %d, want 1 naming cdc replay --id\n%s%s", code, stdout, stderr)
	}
	if r := listParked(t, cfg); len(r) != 1 || r[0].ResentAt != nil {
		t.Fatalf("after the refused resend: %+v, want the row still parked", r)
	}
}

// TestIntegrationGiantEnvelopeIsParkedUnderMessageKeys: a table-less
// outbox with postgres.message_keys. A role that may only log in emits a
// 200 MB message with the outbox's own prefix: its signature cannot be
// checked without reading it, so it is parked as a forged message is
// (whatever relay.on_invalid says), the relay's RSS stays under 256 MiB,
// and the next signed message is delivered.
func TestIntegrationGiantEnvelopeIsParkedUnderMessageKeys(t *testing.T) {
	t.Parallel()
	key := "0123456789abcdef0123456789abcdef"
	url, mo, out, cfg := messagesOutboxOn(t, giantURL(t), "  message_keys: ["+key+"]", "")
	relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	mo.Key = []byte(key)
	conn := pgtest.Connect(t, url)
	p := startCDC(t, "run", "--config", cfg)
	first := relaytest.NewMsg("order.created", "k", 1)
	mo.EmitTx(t, conn, first)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{first}, 60*time.Second, p.Stderr.String)

	emitReadOnly(t, asNobody(t, url), giant{true, mo.Prefix, 200_000_000})
	last := relaytest.NewMsg("order.shipped", "k", 2)
	mo.EmitTx(t, conn, last)
	lines := relaytest.WaitAllDelivered(t, out, []relaytest.Msg{first, last}, 120*time.Second, p.Stderr.String)
	if peak := peakRSS(p.Cmd.Process.Pid); peak > podLimit {
		t.Fatalf("peak RSS %.1f MiB, over the pod's %d MiB", float64(peak)/(1<<20), podLimit>>20)
	}
	p.Stop(t)
	if len(lines) != 2 {
		t.Fatalf("the sink got %d messages, want the 2 signed ones", len(lines))
	}
	parked := listParked(t, cfg)
	if len(parked) != 1 || !strings.Contains(parked[0].Error, "postgres.max_message_bytes") {
		t.Fatalf("parked %+v, want the giant message, the limit named", parked)
	}
}

// TestIntegrationForeignMessagesUnderTheLimitCostTheRelayNoMemory: a role
// that may only log in emits logical messages of another prefix of 50 MB,
// under postgres.max_message_bytes (64 MiB), non-transactional and
// transactional. The relay reads past each without holding it (a message
// that is not its own over 64 KiB is cut as an oversized one is): the
// three cost it at most 16 MiB (peak RSS once delivered less the peak
// once streaming, before them: that one is mostly the test binary's
// pages, and a total bound of 48 MiB failed under load at 48.4), and the
// row written after them is delivered. Before, each was read whole (peak
// RSS over 100 MiB: a cost of 50 MB or more).
func TestIntegrationForeignMessagesUnderTheLimitCostTheRelayNoMemory(t *testing.T) {
	t.Parallel()
	url := giantURL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "")
	cdcInit(t, cfg)
	p := startCDC(t, "run", "--config", cfg)
	if !pgtest.WaitFor(30*time.Second, func() bool { return strings.Contains(p.Stderr.String(), `"message":"streaming"`) }) {
		t.Fatalf("the relay did not start streaming:\n%s", p.Stderr.String())
	}
	idle := peakRSS(p.Cmd.Process.Pid)
	const size = 50_000_000
	emitReadOnly(t, asNobody(t, url), giant{false, "attack", size}, giant{true, "attack", size}, giant{false, "walpost_heartbeat.x", size})
	m := relaytest.NewMsg("after.foreign", "k", 1)
	ob.InsertTx(t, pgtest.Connect(t, url), m)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{m}, 120*time.Second, p.Stderr.String)
	peak := peakRSS(p.Cmd.Process.Pid)
	p.Stop(t)
	if peak-idle > 16<<20 {
		t.Fatalf("three 50 MB messages of other prefixes cost the relay %.1f MiB (peak RSS %.1f MiB less %.1f MiB before them), want at most 16 MiB",
			float64(peak-idle)/(1<<20), float64(peak)/(1<<20), float64(idle)/(1<<20))
	}
	t.Logf("three 50 MB messages of other prefixes: relay peak RSS %.1f MiB, %.1f MiB before them", float64(peak)/(1<<20), float64(idle)/(1<<20))
}
