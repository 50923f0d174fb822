package relay

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/internal/pgtest"
	_ "github.com/walpost/walpost/internal/publish/kafka" // registers kind: kafka
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
	"github.com/walpost/walpost/internal/relaytest"
)

func kafkaSink(c *kafkatest.Cluster, topic string) string {
	return fmt.Sprintf("  - {name: kafka, kind: kafka, brokers: [%s], topic: %s, timeout: 2s}", strings.Join(c.Addrs(), ", "), topic)
}

func recordID(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == "id" {
			return string(h.Value)
		}
	}
	return ""
}

// checkKafka waits until every message of want is in topic, then checks
// the record key and per-key order (first appearances; duplicates allowed).
func checkKafka(t *testing.T, c *kafkatest.Cluster, topic string, want []relaytest.Msg) []*kgo.Record {
	t.Helper()
	var recs []*kgo.Record
	missing := -1
	if !pgtest.WaitFor(60*time.Second, func() bool {
		if c.PartitionInfos(topic) == nil {
			return false
		}
		recs = c.ReadAll(t, topic)
		seen := map[string]bool{}
		for _, r := range recs {
			seen[recordID(r)] = true
		}
		missing = 0
		for _, m := range want {
			if !seen[m.ID] {
				missing++
			}
		}
		return missing == 0
	}) {
		t.Fatalf("%d of %d messages missing from topic %s", missing, len(want), topic)
	}
	pos := map[string]int{}
	for i, m := range want {
		pos[m.ID] = i
	}
	lastByKey := map[string]int{}
	firstSeen := map[string]bool{}
	for _, r := range recs {
		id := recordID(r)
		if firstSeen[id] {
			continue
		}
		firstSeen[id] = true
		i, ok := pos[id]
		if !ok {
			continue
		}
		key := want[i].Key
		if key == "" {
			key = want[i].ID
		}
		if string(r.Key) != key {
			t.Fatalf("record %s has key %q, want %q", id, r.Key, key)
		}
		if last, ok := lastByKey[key]; ok && last > i {
			t.Fatalf("key %s: message %d arrived after message %d (per-key order broken)", key, i, last)
		}
		lastByKey[key] = i
	}
	return recs
}

// TestIntegrationKafkaOutageLosesNothingAndHoldsTheSlot: Kafka unreachable
// for several seconds mid-stream, then back: nothing lost, per-key order
// kept, and during the outage the slot's confirmed position never passed
// the commit of the first transaction Kafka had not acknowledged
// (invariant 1); once Kafka is back it passes the last.
//
// The bound is that commit, not the WAL position when the outage began:
// until the relay reads the first transaction of round 1, it may confirm
// any point before its commit, and there is WAL there that is not the
// outbox's (the relay's own progress and sink-health writes, its
// heartbeat, the server's standby snapshots). A keepalive or a heartbeat
// there is a position outside every transaction the relay was sent, and
// confirming it is what PostgreSQL expects: a transaction whose commit
// record starts at or after the confirmed position is sent again. Under
// load the round's first commit comes late enough for that to happen
// (issue 43: the old bound failed with the slot at 0/155E680, 368 bytes
// past the start of the round, before its first commit).
func TestIntegrationKafkaOutageLosesNothingAndHoldsTheSlot(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	kc := kafkatest.Start(t, kfake.SeedTopics(4, "events"))
	conn := pgtest.Connect(t, url)
	startRelay(t, ob.Config(t, kafkaSink(kc, "events"), "relay: {retry_backoff: 300ms, shutdown_timeout: 2s}"))
	// walInsert is the WAL insert position: taken right after a commit,
	// it is past that commit's record.
	walInsert := func() pglogrepl.LSN {
		var s string
		if err := conn.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return relaytest.ParseLSN(t, s)
	}

	var all []relaytest.Msg
	// write commits round's 10 transactions and returns the WAL insert
	// position right after the first and the last commit.
	write := func(round int) (first, last pglogrepl.LSN) {
		for tx := 0; tx < 10; tx++ {
			msgs := make([]relaytest.Msg, 20)
			for i := range msgs {
				msgs[i] = relaytest.NewMsg("order.created", fmt.Sprintf("order-%d", i%6), round*1000+tx*20+i)
			}
			ob.InsertTx(t, conn, msgs...)
			all = append(all, msgs...)
			if tx == 0 {
				first = walInsert()
			}
		}
		return first, walInsert()
	}
	write(0)
	checkKafka(t, kc, "events", all)
	if !pgtest.WaitFor(10*time.Second, func() bool { return relaytest.SlotConfirmed(t, conn, ob.Slot) > 0 }) {
		t.Fatal("slot never confirmed")
	}
	restore := kc.Outage(t)
	firstCommit, lastCommit := write(1)
	for i := 0; i < 6; i++ {
		time.Sleep(500 * time.Millisecond)
		if c := relaytest.SlotConfirmed(t, conn, ob.Slot); c >= firstCommit {
			t.Fatalf("slot confirmed %s while Kafka was down, past the commit of round 1's first transaction (its record ends before %s)", c, firstCommit)
		}
	}
	restore()
	checkKafka(t, kc, "events", all)
	if !pgtest.WaitFor(10*time.Second, func() bool { return relaytest.SlotConfirmed(t, conn, ob.Slot) >= lastCommit-1 }) {
		t.Fatalf("slot at %s after Kafka came back, not past round 1's last commit (before %s)", relaytest.SlotConfirmed(t, conn, ob.Slot), lastCommit)
	}
}

// TestIntegrationFanOutFileAndKafka: with Kafka down the file sink keeps
// receiving and the slot stays at Kafka's position; after a restart with
// Kafka back, Kafka gets everything and the file sink gets no duplicates
// of what it had acknowledged.
func TestIntegrationFanOutFileAndKafka(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	kc := kafkatest.Start(t, kfake.SeedTopics(2, "fan"))
	out := filepath.Join(t.TempDir(), "out.jsonl")
	conn := pgtest.Connect(t, url)
	cfgPath := ob.Config(t, kafkaSink(kc, "fan")+"\n"+fileSink(out), "relay: {retry_backoff: 300ms, shutdown_timeout: 1s}")
	r := startRelay(t, cfgPath)

	a := []relaytest.Msg{relaytest.NewMsg("t", "a", 1), relaytest.NewMsg("t", "b", 2)}
	ob.InsertTx(t, conn, a...)
	checkKafka(t, kc, "fan", a)
	waitLines(t, out, len(a), 20*time.Second)

	restore := kc.Outage(t)
	var b []relaytest.Msg
	for i := 0; i < 30; i++ {
		m := relaytest.NewMsg("t", fmt.Sprint("k", i%4), 100+i)
		ob.InsertTx(t, conn, m)
		b = append(b, m)
	}
	waitLines(t, out, len(a)+len(b), 20*time.Second) // the file sink carries on
	firstB := relaytest.ParseLSN(t, relaytest.ReadLines(t, out)[len(a)].CommitLSN)
	time.Sleep(1200 * time.Millisecond)
	if c := relaytest.SlotConfirmed(t, conn, ob.Slot); c > firstB {
		t.Fatalf("slot confirmed %s past %s, the first commit Kafka has not acknowledged", c, firstB)
	}
	if err := r.stop(t); err == nil {
		t.Fatal("stop returned nil although Kafka could not drain")
	}
	restore()
	startRelay(t, cfgPath)
	checkKafka(t, kc, "fan", append(append([]relaytest.Msg{}, a...), b...))
	c := relaytest.NewMsg("t", "c", 999)
	ob.InsertTx(t, conn, c)
	checkKafka(t, kc, "fan", []relaytest.Msg{c})
	waitLines(t, out, len(a)+len(b)+1, 20*time.Second)
	lines := relaytest.ReadLines(t, out)
	if len(lines) != len(a)+len(b)+1 {
		t.Fatalf("file sink has %d lines, want %d: it got duplicates after the restart", len(lines), len(a)+len(b)+1)
	}
}
