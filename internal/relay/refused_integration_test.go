package relay

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/internal/store"
)

// bigMsg is a message whose payload is over the test broker's 4 KiB
// message.max.bytes.
func bigMsg(n int) relaytest.Msg {
	m := relaytest.NewMsg("order.created", "k1", n)
	m.Payload = fmt.Sprintf(`{"n": %d, "pad": "%s"}`, n, strings.Repeat("x", 10_000))
	return m
}

// TestIntegrationRefusedMessageIsParkedForThatSinkAndTheRestFlows: a
// message the Kafka broker refuses for its size (message.max.bytes) with
// relay.on_refused: dead_letter is parked in the dead-letter table for the
// kafka sink only; everything else reaches Kafka in order, the file sink
// gets every message including the large one, and the slot moves past it.
// After a restart nothing is parked or sent twice.
func TestIntegrationRefusedMessageIsParkedForThatSinkAndTheRestFlows(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	kc := kafkatest.Start(t, kfake.SeedTopics(2, "refusing"), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfgPath := ob.Config(t, kafkaSink(kc, "refusing")+"\n"+fileSink(out),
		"relay: {on_refused: dead_letter, refused_attempts: 2, retry_backoff: 300ms, shutdown_timeout: 2s}")
	dlq := relaytest.WithDeadLetterTable(t, url, cfgPath)
	conn := pgtest.Connect(t, url)
	r := startRelay(t, cfgPath)

	var before, after []relaytest.Msg
	for i := range 5 {
		before = append(before, relaytest.NewMsg("order.created", fmt.Sprint("k", i%3), i))
	}
	big := bigMsg(100)
	for i := range 5 {
		after = append(after, relaytest.NewMsg("order.created", fmt.Sprint("k", i%3), 200+i))
	}
	// One transaction holds the large message between others, so that the
	// sink gets it inside a batch (a request of each partition stays far
	// under the broker's limit but for the large message).
	ob.InsertTx(t, conn, append(append(append([]relaytest.Msg{}, before...), big), after...)...)
	rest := append(append([]relaytest.Msg{}, before...), after...)
	recs := checkKafka(t, kc, "refusing", rest)
	for _, rec := range recs {
		if recordID(rec) == big.ID {
			t.Fatalf("Kafka stored the large message %s", big.ID)
		}
	}
	lines := relaytest.WaitAllDelivered(t, out, append(append(append([]relaytest.Msg{}, before...), big), after...), 20*time.Second, nil)

	var sink, errText, payload, lsn string
	q := "SELECT sink, error, row_data->'payload'->>'pad', lsn::text FROM " + dlq + " WHERE slot = $1 AND message_id = $2"
	if !pgtest.WaitFor(10*time.Second, func() bool {
		return conn.QueryRow(context.Background(), q, ob.Slot, big.ID).Scan(&sink, &errText, &payload, &lsn) == nil
	}) {
		t.Fatalf("message %s is not in the dead-letter table %s", big.ID, dlq)
	}
	if sink != "kafka" || !strings.Contains(errText, "Message Size Too Large") && !strings.Contains(errText, "max.message.bytes") || len(payload) != 10_000 || lsn == "" {
		t.Fatalf("parked: sink %q error %q payload of %d bytes lsn %q", sink, errText, len(payload), lsn)
	}
	var parked int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+dlq).Scan(&parked); err != nil || parked != 1 {
		t.Fatalf("%d rows in the dead-letter table (%v), want 1", parked, err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if counts, err := store.DeadLetterCounts(context.Background(), conn, store.TablesOf(cfg)); err != nil || len(counts) != 1 || counts["kafka"] != 1 {
		t.Fatalf("DeadLetterCounts = %v, %v; want kafka: 1", counts, err)
	}
	end := relaytest.ParseLSN(t, lines[len(lines)-1].CommitLSN)
	if !pgtest.WaitFor(10*time.Second, func() bool { return relaytest.SlotConfirmed(t, conn, ob.Slot) >= end }) {
		t.Fatal("slot did not move past the transaction holding the refused message")
	}
	if !strings.Contains(r.logs.String(), "parked in the dead-letter table") {
		t.Error("no error-level log line says the message was parked")
	}

	// A restart sends nothing again to either sink and parks nothing again.
	if err := r.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
	startRelay(t, cfgPath)
	next := relaytest.NewMsg("order.created", "k1", 999)
	ob.InsertTx(t, conn, next)
	checkKafka(t, kc, "refusing", []relaytest.Msg{next})
	waitLines(t, out, len(lines)+1, 20*time.Second)
	if n := relaytest.CountLines(out); n != len(lines)+1 {
		t.Fatalf("file sink has %d lines after the restart, want %d", n, len(lines)+1)
	}
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+dlq).Scan(&parked); err != nil || parked != 1 {
		t.Fatalf("%d rows in the dead-letter table after the restart (%v), want 1", parked, err)
	}
}

// TestIntegrationRefusedMessageStopsTheRelayByDefault: with the default
// relay.on_refused (stop) the relay stops with an error naming the
// message, and the slot stays before its transaction.
func TestIntegrationRefusedMessageStopsTheRelayByDefault(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	kc := kafkatest.Start(t, kfake.SeedTopics(1, "strict"), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
	conn := pgtest.Connect(t, url)
	r := startRelay(t, ob.Config(t, kafkaSink(kc, "strict"), "relay: {retry_backoff: 300ms, shutdown_timeout: 1s}"))
	first := relaytest.NewMsg("order.created", "k", 1)
	ob.InsertTx(t, conn, first)
	checkKafka(t, kc, "strict", []relaytest.Msg{first})
	big := bigMsg(2)
	ob.InsertTx(t, conn, big)
	// Past the refused message's commit record. Before it the slot may
	// move (a keepalive or heartbeat outside every transaction, after
	// the relay's own writes: see TestIntegrationKafkaOutageLosesNothingAndHoldsTheSlot).
	var posS string
	if err := conn.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&posS); err != nil {
		t.Fatal(err)
	}
	pos := relaytest.ParseLSN(t, posS)
	select {
	case err := <-r.done:
		r.done <- err
		if err == nil || !strings.Contains(err.Error(), big.ID) {
			t.Fatalf("relay stopped with %v, want an error naming %s", err, big.ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not stop on a refused message")
	}
	if c := relaytest.SlotConfirmed(t, conn, ob.Slot); c >= pos {
		t.Fatalf("slot confirmed %s, past the refused message's commit (its record ends before %s)", c, pos)
	}
}
