package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/examples/e2e"
	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/inbox/inboxkafka"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
	"github.com/walpost/walpost/internal/relaytest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const (
	credits   = 2000                 // business transactions the bank commits
	producers = 4                    // concurrent bank clients
	pace      = 2 * time.Millisecond // pause between two credits of one client, so the stream lasts a while
	topic     = "bank.events"        // the Kafka topic the relay writes
	group     = "reporting"          // the reporting service's consumer group
)

var accounts = []string{"acct-0", "acct-1", "acct-2", "acct-3", "acct-4", "acct-5", "acct-6", "acct-7", "acct-8", "acct-9"}

// TestEndToEndEffectOnceWhenTheRelayIsKilled runs the whole chain:
//
//	bank (accounts + outbox, one transaction per credit)
//	  ─► cdc run (logical replication ─► Kafka)   ← killed with SIGKILL and restarted
//	  ─► Kafka topic bank.events (kfake, in process)
//	  ─► reporting consumer (inboxkafka.Loop: ledger row + total, once per message id)
//
// Kafka ends up holding copies of some messages (the relay re-sends what
// it had not confirmed when it died), yet every credit is booked exactly
// once, and the reporting totals equal the bank's balances.
func TestEndToEndEffectOnceWhenTheRelayIsKilled(t *testing.T) {
	ctx := context.Background()
	start := time.Now()

	// ── 1. Infrastructure ────────────────────────────────────────────────
	// A throwaway PostgreSQL cluster with wal_level=logical (pgtest), one
	// database per service, and an in-process Kafka cluster with the topic.
	bankURL := newDatabase(t, "bank")
	reportingURL := newDatabase(t, "reporting")
	kc := kafkatest.Start(t, kfake.SeedTopics(3, topic))
	bank := newPool(t, bankURL)
	reporting := newPool(t, reportingURL)
	if err := e2e.SetupBank(ctx, bank, accounts); err != nil {
		t.Fatal(err)
	}

	// ── 2. The relay ─────────────────────────────────────────────────────
	// The real binary, built from ./cmd/cdc, with a config that streams the
	// bank's outbox to the topic. "cdc init" creates the outbox table, the
	// publication and the replication slot; from then on every committed
	// outbox row is kept in the WAL until the relay confirms it.
	cdc := relaytest.BuildCDC(t)
	slot := pgtest.Name(t, "bank") // slots are per cluster: a name of the test's own
	cfg := writeConfig(t, fmt.Sprintf(`postgres:
  url: %s
  table: %s
  publication: %s
  slot: %s
  status_interval: 1s
relay:
  retry_backoff: 200ms     # retry a failed Kafka batch quickly
  shutdown_timeout: 5s
sinks:
  - name: events
    kind: kafka
    brokers: [%s]
    topic: %s
    timeout: 2s
log: {level: info, format: json}
`, bankURL, e2e.OutboxTable, slot, slot, strings.Join(kc.Addrs(), ", "), topic))
	if out, err := exec.Command(cdc, "init", "--config", cfg).CombinedOutput(); err != nil {
		t.Fatalf("cdc init: %v\n%s", err, out)
	}
	dropSlotAtEnd(t, bankURL, slot)
	relay := relaytest.StartCDC(t, cdc, nil, "run", "--config", cfg)

	// ── 3. The consumer ──────────────────────────────────────────────────
	// The reporting service reads the topic in a consumer group and books
	// each message through the inbox: the ledger row, the total and the
	// message id commit in one transaction, and the offset is committed to
	// Kafka only after that.
	ib, err := inbox.New(reporting, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e2e.SetupReporting(ctx, reporting, ib); err != nil {
		t.Fatal(err)
	}
	reader := kafka.NewReader(kafka.ReaderConfig{
		Brokers: kc.Addrs(),
		GroupID: group,
		Topic:   topic,
		MaxWait: 250 * time.Millisecond,
	})
	defer reader.Close()
	var processed, duplicates atomic.Int64
	consumerCtx, stopConsumer := context.WithCancel(ctx)
	var consumerErr error
	consumerDone := make(chan struct{})
	defer func() { stopConsumer(); <-consumerDone }()
	go func() {
		defer close(consumerDone)
		consumerErr = e2e.Consume(consumerCtx, reader, ib, inboxkafka.Options{
			RetryBackoff: time.Second,
			OnError:      func(m kafka.Message, id string, err error) { t.Logf("consumer, retrying: %v", err) },
			OnCommitted: func(m kafka.Message, id string, res inbox.Result) {
				if res == inbox.Processed {
					processed.Add(1)
				} else {
					duplicates.Add(1)
				}
			},
		})
	}()

	// ── 4. The producer ──────────────────────────────────────────────────
	// Bank clients commit credits: balance update + outbox row, one
	// transaction each. They keep going while the relay is down.
	var (
		mu        sync.Mutex
		committed = map[string]e2e.AccountCredited{} // message id → credit
		prodErr   = make(chan error, producers)
		prodWG    sync.WaitGroup
	)
	prodCtx, stopProducers := context.WithCancel(ctx)
	defer func() { stopProducers(); prodWG.Wait() }()
	for w := range producers {
		prodWG.Go(func() {
			for i := w; i < credits; i += producers {
				acct, amount := accounts[i%len(accounts)], int64(1+i%7)
				id, err := e2e.Credit(prodCtx, bank, acct, amount)
				if err != nil {
					prodErr <- err
					return
				}
				mu.Lock()
				committed[id] = e2e.AccountCredited{Account: acct, Amount: amount}
				mu.Unlock()
				time.Sleep(pace)
			}
		})
	}
	producerDone := make(chan struct{})
	go func() { prodWG.Wait(); close(producerDone) }()
	countCommitted := func() int { mu.Lock(); defer mu.Unlock(); return len(committed) }

	// ── 5. Kill the relay mid-stream, with Kafka holding unconfirmed messages ──
	// Once a quarter of the credits are in Kafka, Kafka starts losing its
	// answers: it stores each batch but replies "request timed out" (what
	// a broker does when replication is slow). The relay cannot tell that
	// the batch arrived, so it neither confirms those messages to
	// PostgreSQL nor goes on; it retries. Then it is killed with SIGKILL:
	// no chance to clean up. The restarted relay starts from the slot's
	// confirmed position and sends the unconfirmed messages again: copies.
	if !pgtest.WaitFor(20*time.Second, func() bool { return records(kc) >= credits/4 }) {
		t.Fatalf("only %d records in Kafka after 20s\n%s", records(kc), relay.Logs())
	}
	lostAcks := kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.RequestTimedOut, Count: -1})
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	err = lostAcks.Wait(waitCtx, 2) // a batch stored without an answer, and its retry
	cancel()
	if err != nil {
		t.Fatalf("the relay sent no batch while Kafka lost its answers: %v\n%s", err, relay.Logs())
	}
	relay.Kill9(t)
	lostAcks.Remove()
	atKill, committedAtKill := records(kc), countCommitted()
	t.Logf("relay killed with %d records in Kafka and %d of %d credits committed", atKill, committedAtKill, credits)
	relay = relaytest.StartCDC(t, cdc, nil, "run", "--config", cfg)

	// ── 6. Wait for the dust to settle ───────────────────────────────────
	// The producer finishes; the relay delivers the rest; the consumer
	// books every credit and works through every copy Kafka holds.
	select {
	case <-producerDone:
	case err := <-prodErr:
		t.Fatalf("producer: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("producer did not finish within 30s (%d credits)", countCommitted())
	}
	if n := countCommitted(); n != credits {
		t.Fatalf("producer committed %d credits, want %d", n, credits)
	}
	if !pgtest.WaitFor(30*time.Second, func() bool { return processed.Load() == credits }) {
		t.Fatalf("consumer booked %d of %d credits and saw %d duplicates; Kafka holds %d records\n%s",
			processed.Load(), credits, duplicates.Load(), records(kc), relay.Logs())
	}
	// A graceful stop: the relay drains, confirms and exits 0. Then the
	// consumer finishes the records left (copies, if any) and returns when
	// its context ends.
	relay.Stop(t)
	if !pgtest.WaitFor(30*time.Second, func() bool { return processed.Load()+duplicates.Load() == int64(records(kc)) }) {
		t.Fatalf("consumer handled %d of the %d records in Kafka", processed.Load()+duplicates.Load(), records(kc))
	}
	stopConsumer()
	<-consumerDone
	if !errors.Is(consumerErr, context.Canceled) {
		t.Fatalf("consumer stopped with %v, want context.Canceled", consumerErr)
	}

	// ── 7. Check ─────────────────────────────────────────────────────────
	// Kafka: at least one record per credit, every credit's id among them,
	// and some copies (that is the point of the test).
	recs := kc.ReadAll(t, topic)
	copies := map[string]int{}
	for _, r := range recs {
		for _, h := range r.Headers {
			if h.Key == inboxkafka.DefaultIDHeader {
				copies[string(h.Value)]++
			}
		}
	}
	for id := range committed {
		if copies[id] == 0 {
			t.Errorf("credit %s never reached Kafka", id)
		}
	}
	if len(copies) != credits {
		t.Errorf("Kafka holds %d distinct ids, want %d", len(copies), credits)
	}
	dups := len(recs) - credits
	t.Logf("Kafka holds %d records for %d credits: %d copies from the relay's replay and retries", len(recs), credits, dups)
	if dups <= 0 {
		t.Errorf("Kafka holds no copies: the test did not exercise the replay")
	}
	// The consumer: every record was handled once; the copies were
	// dropped by the inbox, not booked.
	if processed.Load() != credits || duplicates.Load() != int64(dups) {
		t.Errorf("consumer: %d processed, %d duplicates; want %d and %d", processed.Load(), duplicates.Load(), credits, dups)
	}
	// The ledger: one row per credit, with the credit's account and amount.
	rows, err := reporting.Query(ctx, `SELECT message_id, account, amount FROM ledger`)
	if err != nil {
		t.Fatal(err)
	}
	booked := map[string]int{}
	n := 0
	for rows.Next() {
		var id string
		var c e2e.AccountCredited
		if err := rows.Scan(&id, &c.Account, &c.Amount); err != nil {
			t.Fatal(err)
		}
		n++
		booked[id]++
		if want, ok := committed[id]; !ok || want != c {
			t.Errorf("ledger row for %s: %+v, want %+v (known: %v)", id, c, want, ok)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != credits || len(booked) != credits {
		t.Errorf("ledger holds %d rows for %d ids, want %d rows, one per credit", n, len(booked), credits)
	}
	// The totals: entries add up to the number of credits, and each
	// account's total equals its balance at the bank.
	var entries int64
	if err := reporting.QueryRow(ctx, `SELECT coalesce(sum(entries), 0) FROM account_totals`).Scan(&entries); err != nil {
		t.Fatal(err)
	}
	if entries != credits {
		t.Errorf("account_totals counts %d entries, want %d", entries, credits)
	}
	for _, a := range accounts {
		var balance, total int64
		if err := bank.QueryRow(ctx, `SELECT balance FROM accounts WHERE id = $1`, a).Scan(&balance); err != nil {
			t.Fatal(err)
		}
		if err := reporting.QueryRow(ctx, `SELECT total FROM account_totals WHERE account = $1`, a).Scan(&total); err != nil {
			t.Fatal(err)
		}
		if balance != total {
			t.Errorf("account %s: bank balance %d, reporting total %d", a, balance, total)
		}
	}
	t.Logf("%d credits booked once each in %v", credits, time.Since(start).Round(100*time.Millisecond))
}

// records returns how many records the topic holds, over all partitions.
func records(kc *kafkatest.Cluster) int {
	n := 0
	for _, p := range kc.PartitionInfos(topic) {
		n += int(p.HighWatermark)
	}
	return n
}

// newDatabase creates a database of the test's own, dropped when the test
// ends, and returns its URL.
func newDatabase(t *testing.T, prefix string) string {
	t.Helper()
	base := pgtest.URL(t)
	name := pgtest.Name(t, prefix)
	pgtest.Exec(t, base, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize())
	t.Cleanup(func() { pgtest.Exec(t, base, `DROP DATABASE `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`) })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

func newPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// dropSlotAtEnd drops the replication slot when the test ends, once the
// relay has let go of it (a database with a slot cannot be dropped).
func dropSlotAtEnd(t *testing.T, url, slot string) {
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("dropping slot %s: %v", slot, err)
			return
		}
		defer conn.Close(ctx)
		if !pgtest.WaitFor(10*time.Second, func() bool {
			_, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
			return err == nil
		}) {
			t.Errorf("could not drop slot %s", slot)
		}
	})
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cdc.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
