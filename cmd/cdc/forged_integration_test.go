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
	"github.com/walpost/walpost/outbox"
)

// TestIntegrationOnlySignedEnvelopesArePublished: a table-less outbox with
// postgres.message_keys. A role with no privilege at all, in a READ ONLY
// transaction, emits an unsigned envelope with the outbox's prefix, a
// non-transactional one, and one signed with another key: each is parked
// in the dead-letter table (on_invalid is stop: a forged message must not
// stop the relay either), logged at error level, never published. The
// producer's messages, signed with a configured key, are published, before
// and after the forgeries; cdc status warns about PUBLIC's EXECUTE on
// pg_logical_emit_message only while no key is configured.
func TestIntegrationOnlySignedEnvelopesArePublished(t *testing.T) {
	t.Parallel()
	key := "0123456789abcdef0123456789abcdef"
	url, mo, out, cfg := messagesOutbox(t, "  message_keys: ["+key+", another-key-of-32-bytes-aaaaaaaa]", "")
	relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	mo.Key = []byte(key)
	conn := pgtest.Connect(t, url)
	ctx := context.Background()

	attacker := asNobody(t, url)

	p := startCDC(t, "run", "--config", cfg)
	first := relaytest.NewMsg("order.created", "k", 1)
	mo.EmitTx(t, conn, first)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{first}, 60*time.Second, p.Stderr.String)

	forged := relaytest.NewMsg("order.refunded", "k", 2)
	unsigned, err := outbox.Envelope(ctx, outbox.Message{ID: forged.ID, Type: forged.Type, Payload: []byte(`{"refund": 1000}`)}, outbox.Prefix(mo.Prefix))
	if err != nil {
		t.Fatal(err)
	}
	wrongKey, err := outbox.Envelope(ctx, outbox.Message{Type: "order.refunded", Payload: []byte(`{"refund": 2000}`)},
		outbox.Prefix(mo.Prefix), outbox.SigningKey([]byte("not-the-relays-key-0123456789abc")))
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginTxFunc(ctx, attacker, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		for _, c := range [][]byte{unsigned, wrongKey} {
			if _, err := tx.Exec(ctx, "SELECT pg_logical_emit_message(true, $1::text, $2::bytea)", mo.Prefix, c); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, "SELECT pg_logical_emit_message(false, $1::text, $2::bytea)", mo.Prefix, unsigned)
		return err
	})
	if err != nil {
		t.Fatalf("emitting as a role without privileges: %v", err)
	}
	last := relaytest.NewMsg("order.shipped", "k", 3)
	mo.EmitTx(t, conn, last)
	lines := relaytest.WaitAllDelivered(t, out, []relaytest.Msg{first, last}, 60*time.Second, p.Stderr.String)
	if !pgtest.WaitFor(10*time.Second, func() bool { return len(listParked(t, cfg)) == 3 }) {
		t.Fatalf("parked %+v, want the 3 forged messages\n%s", listParked(t, cfg), p.Stderr.String())
	}
	p.Stop(t)
	if len(lines) != 2 {
		t.Fatalf("the sink got %d messages, want the 2 signed ones: %+v", len(lines), lines)
	}
	if n := strings.Count(p.Stderr.String(), `"level":"error"`); n < 3 || !strings.Contains(p.Stderr.String(), "not signed with a key of postgres.message_keys") {
		t.Fatalf("%d error-level lines, want one per forged message\n%s", n, p.Stderr.String())
	}
	for _, r := range listParked(t, cfg) {
		if !strings.Contains(r.Error, "signature") || r.Sink != "" {
			t.Fatalf("parked %+v: want the signature named", r)
		}
	}
	code, stdout, _ := cdc(t, nil, "status", "--config", cfg)
	if code != 0 || strings.Contains(stdout, "PUBLIC may execute") {
		t.Fatalf("cdc status with message_keys: exit %d, no PUBLIC warning expected\n%s", code, stdout)
	}
}

// TestIntegrationMessageRolesTakeEmitFromPublic: with postgres.message_roles,
// cdc init (a superuser) takes EXECUTE on pg_logical_emit_message from
// PUBLIC and grants it to the listed roles: a role not listed can no
// longer emit, a listed one can, and cdc status, which warned before,
// no longer does. Without message_keys, cdc run warned at start.
func TestIntegrationMessageRolesTakeEmitFromPublic(t *testing.T) {
	t.Parallel()
	// A cluster of its own: the grants on pg_logical_emit_message are the
	// whole cluster's.
	c := startCluster(t)
	url := c.URL("postgres")
	producer, other := "producer_ok", "producer_other"
	pgtest.Exec(t, url, "CREATE ROLE "+producer+" LOGIN PASSWORD 'x'", "CREATE ROLE "+other+" LOGIN PASSWORD 'x'")
	mo := relaytest.NewMessagesOutbox(t, url)
	cfgOpen := mo.Config(t, "  - {name: out, kind: discard}", "", "")
	cdcInit(t, cfgOpen)
	code, stdout, _ := cdc(t, nil, "status", "--config", cfgOpen)
	if code != 0 || !strings.Contains(stdout, "PUBLIC may execute pg_logical_emit_message") {
		t.Fatalf("cdc status before message_roles: exit %d, want 0 and a warning\n%s", code, stdout)
	}
	p := startCDC(t, "run", "--config", cfgOpen)
	if !pgtest.WaitFor(30*time.Second, func() bool { return strings.Contains(p.Stderr.String(), "PUBLIC may execute pg_logical_emit_message") }) {
		t.Fatalf("cdc run gave no warning\n%s", p.Stderr.String())
	}
	p.Stop(t)

	cfg := mo.Config(t, "  - {name: out, kind: discard}", fmt.Sprintf("  message_roles: [%s, postgres]", producer), "")
	var initOut strings.Builder
	if code := run([]string{"init", "--config", cfg}, &initOut, &initOut); code != 0 ||
		!strings.Contains(initOut.String(), "EXECUTE taken from PUBLIC, granted to "+producer+", postgres") {
		t.Fatalf("cdc init with message_roles: exit %d\n%s", code, initOut.String())
	}
	emit := func(role string) error {
		conn := pgtest.Connect(t, strings.Replace(url, "postgres@", role+":x@", 1))
		_, err := conn.Exec(context.Background(), "SELECT pg_logical_emit_message(true, 'x', 'y')")
		return err
	}
	if err := emit(producer); err != nil {
		t.Fatalf("a listed role cannot emit: %v", err)
	}
	if err := emit(other); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("a role not listed emitted: %v", err)
	}
	code, stdout, _ = cdc(t, nil, "status", "--config", cfg)
	if code != 0 || strings.Contains(stdout, "PUBLIC may execute") {
		t.Fatalf("cdc status after message_roles: exit %d, want no warning\n%s", code, stdout)
	}
}

// TestIntegrationForgedAdoptMessagesAreIgnored: cdc init --adopt hands two
// unsent rows to the new slot; then a role with no privilege at all, in a
// READ ONLY transaction, emits adopt messages with the slot's prefix: a
// copy of a real one with another id and type, and a malformed one. The
// relay publishes the two adopted rows and the rows inserted after, never
// the forgeries (logged at error level, not parked, not a stop), and cdc
// skip has nothing to skip.
func TestIntegrationForgedAdoptMessagesAreIgnored(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	pgtest.Exec(t, url, "ALTER TABLE "+ob.Table+" ADD COLUMN sent_at timestamptz")
	conn := pgtest.Connect(t, url)
	ctx := context.Background()
	unsent := []relaytest.Msg{relaytest.NewMsg("order.created", "k", 1), relaytest.NewMsg("order.created", "k", 2)}
	ob.InsertTx(t, conn, unsent...)
	out := t.TempDir() + "/out.jsonl"
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "columns: {sent_at: sent_at}")
	adoptTable := "public." + pgtest.Name(t, "adopt")
	addPostgres(t, cfg, "adopt_table: "+adoptTable)
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP TABLE IF EXISTS "+adoptTable) })
	if code, stdout, stderr := cdc(t, nil, "init", "--adopt", "--config", cfg); code != 0 || !strings.Contains(stdout, "2 unsent row(s)") {
		t.Fatalf("cdc init --adopt: exit %d\n%s%s", code, stdout, stderr)
	}
	var real string
	if err := conn.QueryRow(ctx, `SELECT convert_from(substr(data, 1 + 1 + 1 + 8 + length($2) + 1 + 4), 'UTF8')
		FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', $3, 'messages', 'true')
		WHERE substr(data, 1, 1) = 'M'::bytea LIMIT 1`, ob.Slot, "walpost.adopt."+ob.Slot, ob.Publication).Scan(&real); err != nil {
		t.Fatalf("reading an adopt message: %v", err)
	}
	forgedID := relaytest.NewMsg("x", "k", 0).ID
	forged := strings.Replace(strings.Replace(real, unsent[0].ID, forgedID, 1), "order.created", "order.refunded", 1)
	if forged == real || !strings.Contains(forged, forgedID) {
		t.Fatalf("could not forge from %s", real)
	}

	attacker := asNobody(t, url)
	err := pgx.BeginTxFunc(ctx, attacker, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		for _, c := range []string{forged, `{"v":1,"oids":[1],"values":["malformed"]}`} {
			if _, err := tx.Exec(ctx, "SELECT pg_logical_emit_message(true, $1::text, $2::text)", "walpost.adopt."+ob.Slot, c); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("emitting as a role without privileges: %v", err)
	}
	if code, stdout, stderr := cdc(t, nil, "skip", "--config", cfg, "--lsn", "0/0"); code == 0 || !strings.Contains(stdout+stderr, "nothing to skip") {
		t.Fatalf("cdc skip: exit %d, want nothing to skip\n%s%s", code, stdout, stderr)
	}
	after := relaytest.NewMsg("order.shipped", "k", 3)
	ob.InsertTx(t, conn, after)
	p := startCDC(t, "run", "--config", cfg)
	want := append(append([]relaytest.Msg{}, unsent...), after)
	lines := relaytest.WaitAllDelivered(t, out, want, 60*time.Second, p.Stderr.String)
	if !pgtest.WaitFor(10*time.Second, func() bool { return strings.Count(p.Stderr.String(), "forged adopt message ignored") == 2 }) {
		t.Fatalf("want two error lines for the forged adopt messages\n%s", p.Stderr.String())
	}
	p.Stop(t)
	for _, l := range lines {
		if l.ID == forgedID || l.Type == "order.refunded" {
			t.Fatalf("the forged adopt message was published: %+v", l)
		}
	}
	if len(lines) != 3 {
		t.Fatalf("%d lines, want the 2 adopted rows and the one inserted after: %+v", len(lines), lines)
	}
}

// TestIntegrationMessageRolesTakeEmitFromPublicForATableOutbox: with an
// outbox table, postgres.message_roles lets cdc init take EXECUTE on
// pg_logical_emit_message from PUBLIC too (a role that may only log in can
// no longer emit the logical messages every relay of the database reads),
// while the relay's own role, listed, still writes its heartbeat and
// relays rows.
func TestIntegrationMessageRolesTakeEmitFromPublicForATableOutbox(t *testing.T) {
	t.Parallel()
	c := startCluster(t) // the grants are this database's, for every test on it
	url := c.URL("postgres")
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(b), "postgres:\n", "postgres:\n  message_roles: [postgres]\n  heartbeat_interval: 1s\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	var initOut strings.Builder
	if code := run([]string{"init", "--config", cfg}, &initOut, &initOut); code != 0 ||
		!strings.Contains(initOut.String(), "EXECUTE taken from PUBLIC, granted to postgres") {
		t.Fatalf("cdc init with message_roles on a table outbox: exit %d\n%s", code, initOut.String())
	}
	pgtest.Exec(t, url, "CREATE ROLE nobody_emit LOGIN PASSWORD 'x'")
	nobody := pgtest.Connect(t, strings.Replace(url, "postgres@", "nobody_emit:x@", 1))
	if _, err := nobody.Exec(context.Background(), "SELECT pg_logical_emit_message(false, 'x', repeat('y', 1000))"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("a role not listed emitted: %v", err)
	}
	p := startCDC(t, "run", "--config", cfg)
	m := relaytest.NewMsg("order.created", "k", 1)
	ob.InsertTx(t, pgtest.Connect(t, url), m)
	relaytest.WaitAllDelivered(t, out, []relaytest.Msg{m}, 60*time.Second, p.Stderr.String)
	if !pgtest.WaitFor(20*time.Second, func() bool { return strings.Contains(p.Stderr.String(), "heartbeat written") }) {
		t.Fatalf("the relay wrote no heartbeat:\n%s", p.Stderr.String())
	}
	if strings.Contains(p.Stderr.String(), "permission denied") {
		t.Fatalf("the relay's heartbeat was refused:\n%s", p.Stderr.String())
	}
	p.Stop(t)
}
