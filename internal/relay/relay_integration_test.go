package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/admin"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/internal/replication"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// started is a relay running in the test's process.
type started struct {
	r      *Relay
	cancel context.CancelFunc
	done   chan error
	logs   *relaytest.Buffer
}

func startRelay(t *testing.T, cfgPath string) *started {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Setup(context.Background(), cfg, func(string) {}); err != nil {
		t.Fatal(err)
	}
	logs := &relaytest.Buffer{}
	log := zerolog.New(io.MultiWriter(logs, zerolog.NewTestWriter(t))).Level(zerolog.InfoLevel)
	r, err := New(cfg, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{r: r, cancel: cancel, done: make(chan error, 1), logs: logs}
	go func() {
		err := r.Run(ctx)
		r.Close()
		s.done <- err
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			t.Error("relay did not stop within 30s")
		}
	})
	// Messages committed before the slot exists are not in it: wait for it.
	conn := pgtest.Connect(t, cfg.Postgres.URL)
	if !pgtest.WaitFor(20*time.Second, func() bool {
		return relaytest.SlotConfirmed(t, conn, cfg.Postgres.Slot) != 0
	}) {
		t.Fatalf("slot %s not created within 20s", cfg.Postgres.Slot)
	}
	return s
}

// prepare creates the publication, slot and tables as 'cdc init' does.
func prepare(t *testing.T, cfgPath string) {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Setup(context.Background(), cfg, func(string) {}); err != nil {
		t.Fatal(err)
	}
}

// stop stops the relay gracefully and returns Run's error.
func (s *started) stop(t *testing.T) error {
	t.Helper()
	s.cancel()
	select {
	case err := <-s.done:
		s.done <- err // for Cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not stop within 30s")
		return nil
	}
}

func waitLines(t *testing.T, path string, n int, timeout time.Duration) {
	t.Helper()
	if !pgtest.WaitFor(timeout, func() bool { return relaytest.CountLines(path) >= n }) {
		t.Fatalf("%s has %d lines after %v, want %d", path, relaytest.CountLines(path), timeout, n)
	}
}

func fileSink(path string) string {
	return fmt.Sprintf("  - {name: out, kind: file, path: %s}", path)
}

// TestIntegrationDeliversExactlyTheCommittedMessagesInCommitOrder: mixed
// transaction sizes, interleaved with writes to other tables, rolled-back
// transactions and transactions with no outbox row.
func TestIntegrationDeliversExactlyTheCommittedMessagesInCommitOrder(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	startRelay(t, ob.Config(t, fileSink(out), ""))
	other := pgtest.Name(t, "other")
	conn := pgtest.Connect(t, url)
	ctx := context.Background()
	pgtest.Exec(t, url, "CREATE TABLE "+other+" (id serial primary key, v text)")
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP TABLE "+other) })

	var want []relaytest.Msg
	sizes := []int{1, 3, 50, 1, 0, 7, 200, 2, 1}
	for round := 0; round < 3; round++ {
		for i, size := range sizes {
			msgs := make([]relaytest.Msg, size)
			for j := range msgs {
				msgs[j] = relaytest.NewMsg(fmt.Sprintf("order.%d", j%3), fmt.Sprintf("k%d", j%5), j)
				if j%4 == 0 {
					msgs[j].Key = "" // NULL key
				}
				if j%3 == 0 {
					msgs[j].Headers = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "t1"}
				}
			}
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "INSERT INTO "+other+" (v) VALUES ('before')"); err != nil {
					return err
				}
				if err := ob.Insert(ctx, tx, msgs...); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "INSERT INTO "+other+" (v) VALUES ('after')")
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, msgs...)
			// A rolled-back transaction with outbox rows.
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := ob.Insert(ctx, tx, relaytest.NewMsg("rolled.back", "x", i)); err != nil {
				t.Fatal(err)
			}
			tx.Rollback(ctx)
			pgtest.Exec(t, url, "INSERT INTO "+other+" (v) SELECT 'busy' FROM generate_series(1, 100)")
		}
	}
	waitLines(t, out, len(want), 30*time.Second)
	lines := relaytest.ReadLines(t, out)
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d", len(lines), len(want))
	}
	var prevCommit, prevLSN pglogrepl.LSN
	for i, l := range lines {
		w := want[i]
		if l.ID != w.ID || l.Type != w.Type {
			t.Fatalf("line %d: got %s %s, want %s %s (order or content differs)", i, l.ID, l.Type, w.ID, w.Type)
		}
		if (w.Key == "") != (l.Key == nil) || (l.Key != nil && *l.Key != w.Key) {
			t.Fatalf("line %d: key %v, want %q", i, l.Key, w.Key)
		}
		var gotP, wantP any
		json.Unmarshal(l.Payload, &gotP)
		json.Unmarshal([]byte(w.Payload), &wantP)
		if !reflect.DeepEqual(gotP, wantP) {
			t.Fatalf("line %d: payload %s, want %s", i, l.Payload, w.Payload)
		}
		if len(w.Headers) > 0 && !reflect.DeepEqual(l.Headers, w.Headers) || len(w.Headers) == 0 && len(l.Headers) != 0 {
			t.Fatalf("line %d: headers %v, want %v", i, l.Headers, w.Headers)
		}
		lsn, commit := relaytest.ParseLSN(t, l.LSN), relaytest.ParseLSN(t, l.CommitLSN)
		if lsn == 0 || commit < lsn || commit < prevCommit || (commit == prevCommit && lsn <= prevLSN) {
			t.Fatalf("line %d: lsn %s commit %s after lsn %s commit %s: not in WAL order", i, lsn, commit, prevLSN, prevCommit)
		}
		prevCommit, prevLSN = commit, lsn
	}
	// Everything acknowledged: the slot moves past the last commit.
	if !pgtest.WaitFor(10*time.Second, func() bool { return relaytest.SlotConfirmed(t, conn, ob.Slot) > prevCommit }) {
		t.Fatalf("slot confirmed %s, want past the last commit %s", relaytest.SlotConfirmed(t, conn, ob.Slot), prevCommit)
	}
}

// TestIntegrationBadPayloadStopsWithAClearErrorAndConfirmsNothingPastIt:
// a text payload column with a row that is not JSON.
func TestIntegrationBadPayloadStopsWithAClearErrorAndConfirmsNothingPastIt(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	pgtest.Exec(t, url, "ALTER TABLE "+ob.Table+" ALTER COLUMN payload TYPE text")
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfgPath := ob.Config(t, fileSink(out), "")
	prepare(t, cfgPath)
	conn := pgtest.Connect(t, url)
	good := relaytest.NewMsg("ok", "k", 1)
	ob.InsertTx(t, conn, good)
	var before string
	if err := conn.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&before); err != nil {
		t.Fatal(err)
	}
	bad := relaytest.NewMsg("bad", "k", 2)
	if _, err := conn.Exec(context.Background(), "INSERT INTO "+ob.Table+" (id, type, payload) VALUES ($1, 'bad', 'hello, not json')", bad.ID); err != nil {
		t.Fatal(err)
	}
	after := relaytest.NewMsg("after", "k", 3)
	ob.InsertTx(t, conn, after)

	r := startRelay(t, cfgPath)
	var err error
	select {
	case err = <-r.done:
		r.done <- err
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not stop on a bad row")
	}
	if err == nil || !strings.Contains(err.Error(), bad.ID) || !strings.Contains(err.Error(), "not valid JSON") || !strings.Contains(err.Error(), "LSN") {
		t.Fatalf("err = %v, want one naming message %s, its LSN and the cause", err, bad.ID)
	}
	lines := relaytest.ReadLines(t, out)
	if len(lines) != 1 || lines[0].ID != good.ID {
		t.Fatalf("file holds %+v, want only the good message", lines)
	}
	beforeLSN := relaytest.ParseLSN(t, before)
	c := relaytest.SlotConfirmed(t, conn, ob.Slot)
	if c > beforeLSN {
		t.Fatalf("slot confirmed %s, past the bad message's transaction (starts after %s)", c, beforeLSN)
	}
	if goodCommit := relaytest.ParseLSN(t, lines[0].CommitLSN); c <= goodCommit {
		t.Fatalf("slot confirmed %s: the good message before the bad one (commit %s) was delivered but not confirmed", c, goodCommit)
	}
}

// TestIntegrationIdleOutboxBusyDatabaseLetsTheSlotAdvance: invariant 4.
func TestIntegrationIdleOutboxBusyDatabaseLetsTheSlotAdvance(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	conn := pgtest.Connect(t, url)
	startRelay(t, ob.Config(t, fileSink(out), ""))
	ob.InsertTx(t, conn, relaytest.NewMsg("one", "k", 1))
	waitLines(t, out, 1, 20*time.Second)
	other := pgtest.Name(t, "busy")
	pgtest.Exec(t, url, "CREATE TABLE "+other+" (id bigserial primary key, v text)")
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP TABLE "+other) })
	// ~48 MB of WAL in other tables, in many transactions.
	for i := 0; i < 40; i++ {
		pgtest.Exec(t, url, "INSERT INTO "+other+" (v) SELECT repeat('x', 1000) FROM generate_series(1, 1000)")
	}
	retained := func() int64 {
		var n int64
		conn.QueryRow(context.Background(), "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1", ob.Slot).Scan(&n)
		return n
	}
	if r := retained(); r < 16<<20 {
		t.Logf("retained right after the writes: %d bytes (already under 16 MB)", r)
	}
	if !pgtest.WaitFor(45*time.Second, func() bool { return retained() < 16<<20 }) {
		t.Fatalf("slot holds %d bytes of WAL behind the server after the load, want < 16 MB", retained())
	}
}

// TestIntegrationGracefulStopConfirmsEverythingDelivered: on stop the
// relay drains and confirms up to the last delivered transaction.
func TestIntegrationGracefulStopConfirmsEverythingDelivered(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	conn := pgtest.Connect(t, url)
	r := startRelay(t, ob.Config(t, fileSink(out), ""))
	var msgs []relaytest.Msg
	for i := 0; i < 500; i++ {
		msgs = append(msgs, relaytest.NewMsg("t", "k", i))
	}
	ob.InsertTx(t, conn, msgs...)
	waitLines(t, out, len(msgs), 30*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatalf("graceful stop returned %v", err)
	}
	lines := relaytest.ReadLines(t, out)
	last := relaytest.ParseLSN(t, lines[len(lines)-1].CommitLSN)
	if c := relaytest.SlotConfirmed(t, conn, ob.Slot); c <= last {
		t.Fatalf("after a graceful stop the slot is at %s, want past the last commit %s", c, last)
	}
	// A restart delivers nothing again.
	startRelay(t, ob.Config(t, fileSink(out), ""))
	more := relaytest.NewMsg("t", "k", 1000)
	ob.InsertTx(t, conn, more)
	waitLines(t, out, len(msgs)+1, 30*time.Second)
	lines = relaytest.ReadLines(t, out)
	if len(lines) != len(msgs)+1 || lines[len(lines)-1].ID != more.ID {
		t.Fatalf("after restart: %d lines, last %s; want %d, last %s (no re-delivery)", len(lines), lines[len(lines)-1].ID, len(msgs)+1, more.ID)
	}
}

// TestIntegrationReconnectsWhenTheWALSenderIsKilled: a dropped replication
// connection mid-stream loses nothing.
func TestIntegrationReconnectsWhenTheWALSenderIsKilled(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	conn := pgtest.Connect(t, url)
	r := startRelay(t, ob.Config(t, fileSink(out), "relay: {batch_size: 50}"))
	var all []relaytest.Msg
	for round := 0; round < 5; round++ {
		msgs := make([]relaytest.Msg, 2000)
		for i := range msgs {
			msgs[i] = relaytest.NewMsg("t", fmt.Sprint(i%10), i)
		}
		ob.InsertTx(t, conn, msgs...)
		all = append(all, msgs...)
		if !pgtest.WaitFor(10*time.Second, func() bool {
			var n int
			conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active", ob.Slot).Scan(&n)
			return n == 1
		}) {
			t.Fatal("slot not active")
		}
		if _, err := conn.Exec(context.Background(), "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1", ob.Slot); err != nil {
			t.Fatal(err)
		}
	}
	relaytest.WaitAllDelivered(t, out, all, 60*time.Second, nil)
	if !strings.Contains(r.logs.String(), "reconnecting") {
		t.Fatal("the relay never logged a reconnect: the test did not cut the stream")
	}
}

// TestIntegrationSurvivesAPostgresRestart: an immediate (crash) restart of
// the server mid-stream loses nothing.
func TestIntegrationSurvivesAPostgresRestart(t *testing.T) {
	cl := pgtest.SharedCluster(t)
	if cl == nil {
		t.Skip("needs the throwaway cluster (WALPOST_TEST_DATABASE_URL is set)")
	}
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	startRelay(t, ob.Config(t, fileSink(out), ""))
	write := func(n int) []relaytest.Msg {
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		msgs := make([]relaytest.Msg, n)
		for i := range msgs {
			msgs[i] = relaytest.NewMsg("t", fmt.Sprint(i%7), i)
		}
		ob.InsertTx(t, conn, msgs...)
		return msgs
	}
	all := write(3000)
	if err := cl.Restart("immediate"); err != nil {
		t.Fatal(err)
	}
	all = append(all, write(3000)...)
	relaytest.WaitAllDelivered(t, out, all, 90*time.Second, nil)
}

// TestIntegrationStartupErrorsSayWhatToDo: missing table, a slot of
// another plugin, a missing mapped column, wal_level=replica.
func TestIntegrationStartupErrorsSayWhatToDo(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	run := func(cfgPath string) error {
		cfg, err := config.Load(cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		r, err := New(cfg, zerolog.Nop(), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.check(ctx)
		return err
	}
	out := filepath.Join(t.TempDir(), "out.jsonl")

	t.Run("missing table", func(t *testing.T) {
		ob := relaytest.Outbox{URL: url, Table: "public.no_such_outbox", Publication: "p_missing", Slot: "s_missing"}
		err := run(ob.Config(t, fileSink(out), ""))
		if !errors.Is(err, replication.ErrNoTable) || !strings.Contains(err.Error(), "cdc init") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("slot of another plugin", func(t *testing.T) {
		ob := relaytest.NewOutbox(t, url)
		pgtest.Exec(t, url, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", ob.Publication, ob.Table))
		pgtest.Exec(t, url, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'test_decoding')", ob.Slot))
		err := run(ob.Config(t, fileSink(out), ""))
		if !errors.Is(err, replication.ErrSlotPlugin) || !strings.Contains(err.Error(), "test_decoding") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("missing mapped column", func(t *testing.T) {
		ob := relaytest.NewOutbox(t, url)
		err := run(ob.Config(t, fileSink(out), "columns: {type: kind}"))
		if !errors.Is(err, replication.ErrNoColumn) || !strings.Contains(err.Error(), `columns.type`) || !strings.Contains(err.Error(), `"kind"`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("no replication privilege", func(t *testing.T) {
		ob := relaytest.NewOutbox(t, url)
		role := pgtest.Name(t, "r")
		pgtest.Exec(t, url, "CREATE ROLE "+role+" LOGIN NOREPLICATION")
		t.Cleanup(func() { pgtest.Exec(t, url, "DROP ROLE "+role) })
		ob.URL = strings.Replace(url, "postgres@", role+"@", 1)
		err := run(ob.Config(t, fileSink(out), ""))
		if !errors.Is(err, replication.ErrPrivileges) || !strings.Contains(err.Error(), "REPLICATION") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("wal_level replica", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a second cluster")
		}
		cl, err := pgtest.Start(pgtest.Options{Settings: []string{"wal_level = replica"}})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ob := relaytest.Outbox{URL: cl.URL("postgres"), Table: "public.outbox", Publication: "p", Slot: "s"}
		err = run(ob.Config(t, fileSink(out), ""))
		if !errors.Is(err, replication.ErrWALLevel) || !strings.Contains(err.Error(), "wal_level = logical") {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestIntegrationSecondInstanceWaitsForTheSlot: single active instance;
// the standby takes over when the first stops, and nothing is lost.
func TestIntegrationSecondInstanceWaitsForTheSlot(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out1 := filepath.Join(t.TempDir(), "a.jsonl")
	out2 := filepath.Join(t.TempDir(), "b.jsonl")
	conn := pgtest.Connect(t, url)
	first := startRelay(t, ob.Config(t, fileSink(out1), ""))
	m1 := relaytest.NewMsg("t", "k", 1)
	ob.InsertTx(t, conn, m1)
	waitLines(t, out1, 1, 20*time.Second)
	second := startRelay(t, ob.Config(t, fileSink(out2), ""))
	if !pgtest.WaitFor(20*time.Second, func() bool { return strings.Contains(second.logs.String(), "held by another process") }) {
		t.Fatal("second instance did not report the slot as held")
	}
	if err := first.stop(t); err != nil {
		t.Fatal(err)
	}
	m2 := relaytest.NewMsg("t", "k", 2)
	ob.InsertTx(t, conn, m2)
	waitLines(t, out2, 1, 30*time.Second)
	lines := relaytest.ReadLines(t, out2)
	if lines[0].ID != m2.ID {
		t.Fatalf("standby delivered %s first, want %s (m1 was confirmed by the first instance)", lines[0].ID, m2.ID)
	}
}

// TestIntegrationDeadLetterPolicyParksTheBadRowAndGoesOn: with
// relay.on_invalid: dead_letter, the bad row lands in the dead-letter table
// with its id, LSN, error and columns, and the messages after it flow.
func TestIntegrationDeadLetterPolicyParksTheBadRowAndGoesOn(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	pgtest.Exec(t, url, "ALTER TABLE "+ob.Table+" ALTER COLUMN payload TYPE text")
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfgPath := ob.Config(t, fileSink(out), "relay: {on_invalid: dead_letter}")
	dlq := relaytest.WithDeadLetterTable(t, url, cfgPath)
	conn := pgtest.Connect(t, url)
	startRelay(t, cfgPath)

	good := relaytest.NewMsg("ok", "k", 1)
	ob.InsertTx(t, conn, good)
	bad := relaytest.NewMsg("bad", "k", 2)
	if _, err := conn.Exec(context.Background(), "INSERT INTO "+ob.Table+" (id, type, key, payload) VALUES ($1, 'bad', 'k', 'hello, not json')", bad.ID); err != nil {
		t.Fatal(err)
	}
	after := relaytest.NewMsg("after", "k", 3)
	ob.InsertTx(t, conn, after)
	waitLines(t, out, 2, 20*time.Second)
	lines := relaytest.ReadLines(t, out)
	if len(lines) != 2 || lines[0].ID != good.ID || lines[1].ID != after.ID {
		t.Fatalf("file holds %+v, want the good message and the one after the bad row", lines)
	}
	var id, errText, payload, lsn string
	err := conn.QueryRow(context.Background(), "SELECT message_id, error, row_data->>'payload', lsn::text FROM "+dlq+" WHERE slot = $1", ob.Slot).Scan(&id, &errText, &payload, &lsn)
	if err != nil {
		t.Fatalf("reading the dead-letter table: %v", err)
	}
	if id != bad.ID || !strings.Contains(errText, "not valid JSON") || payload != "hello, not json" || lsn == "" {
		t.Fatalf("parked row: id %s error %q payload %q lsn %s", id, errText, payload, lsn)
	}
	last := relaytest.ParseLSN(t, lines[1].CommitLSN)
	if !pgtest.WaitFor(10*time.Second, func() bool { return relaytest.SlotConfirmed(t, conn, ob.Slot) > last }) {
		t.Fatal("slot did not advance past the parked row")
	}
}

// TestIntegrationOutboxSchemaChangesWhileStreaming: columns added and
// dropped on the outbox table while the relay streams (also inside the
// transaction that then inserts) change nothing in what is delivered;
// dropping a mapped column stops the relay with an error naming it, even
// with relay.on_invalid: dead_letter (parking would take every row).
func TestIntegrationOutboxSchemaChangesWhileStreaming(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfgPath := ob.Config(t, fileSink(out), "relay: {on_invalid: dead_letter}")
	dlq := relaytest.WithDeadLetterTable(t, url, cfgPath)
	r := startRelay(t, cfgPath)
	conn := pgtest.Connect(t, url)
	ctx := context.Background()

	var want []relaytest.Msg
	batch := func(n int) []relaytest.Msg {
		msgs := make([]relaytest.Msg, 3)
		for i := range msgs {
			msgs[i] = relaytest.NewMsg("order.created", fmt.Sprint("k", i), n*10+i)
		}
		want = append(want, msgs...)
		return msgs
	}
	ob.InsertTx(t, conn, batch(0)...)
	pgtest.Exec(t, url, "ALTER TABLE "+ob.Table+" ADD COLUMN tenant text DEFAULT 't0'")
	ob.InsertTx(t, conn, batch(1)...)
	pgtest.Exec(t, url, "ALTER TABLE "+ob.Table+" DROP COLUMN tenant")
	ob.InsertTx(t, conn, batch(2)...)
	// DDL and inserts in one transaction: the new Relation message comes
	// inside it.
	msgs := batch(3)
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := ob.Insert(ctx, tx, msgs[0]); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "ALTER TABLE "+ob.Table+" ADD COLUMN note text, ALTER COLUMN type TYPE varchar(200)"); err != nil {
			return err
		}
		return ob.Insert(ctx, tx, msgs[1:]...)
	}); err != nil {
		t.Fatal(err)
	}
	ob.InsertTx(t, conn, batch(4)...)
	lines := relaytest.WaitAllDelivered(t, out, want, 30*time.Second, r.logs.String)
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d", len(lines), len(want))
	}
	for i, l := range lines {
		var p struct{ N int }
		json.Unmarshal(l.Payload, &p)
		if l.ID != want[i].ID || l.Key == nil || *l.Key != want[i].Key || !strings.Contains(want[i].Payload, fmt.Sprintf(`"n": %d,`, p.N)) {
			t.Fatalf("line %d: %s key %v payload %s, want %s key %s payload %s", i, l.ID, l.Key, l.Payload, want[i].ID, want[i].Key, want[i].Payload)
		}
	}

	// A mapped column dropped: the relay stops and says which.
	last := relaytest.ParseLSN(t, lines[len(lines)-1].CommitLSN)
	pgtest.Exec(t, url, "ALTER TABLE "+ob.Table+" DROP COLUMN headers")
	pgtest.Exec(t, url, "INSERT INTO "+ob.Table+" (id, type, key, payload) VALUES (gen_random_uuid(), 't', 'k', '{}')")
	select {
	case err := <-r.done:
		r.done <- err
		if err == nil || !strings.Contains(err.Error(), `columns.headers "headers"`) || !strings.Contains(err.Error(), "restart") {
			t.Fatalf("relay stopped with %v, want an error naming the headers column and saying what to do", err)
		}
		t.Logf("stopped with: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not stop after a mapped column was dropped")
	}
	if c := relaytest.SlotConfirmed(t, conn, ob.Slot); c <= last {
		t.Fatalf("slot confirmed %s, not past the last delivered commit %s", c, last)
	}
	var parked int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+dlq).Scan(&parked); err != nil || parked != 0 {
		t.Fatalf("%d rows parked (%v): a table that no longer fits the mapping must stop the relay, not park its rows", parked, err)
	}
}
