package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
	"github.com/walpost/walpost/internal/publish/natsjs"
	"github.com/walpost/walpost/internal/publish/natsjs/natstest"
	"github.com/walpost/walpost/internal/publish/rabbitmq/rabbittest"
	"github.com/walpost/walpost/internal/publish/servicebus/sbfake"
	"github.com/walpost/walpost/internal/relaytest"
)

// copySink is one sink kind for TestIntegrationCopyGroupCutByARefusalIsDeliveredWholeAfterTheRestart:
// its config line, the payload size it refuses, and how to read back the
// ids it holds.
type copySink struct {
	yaml    string
	tooBig  int
	holding func() map[string]int
}

func webhookCopySink(t *testing.T) copySink {
	var mu sync.Mutex
	got := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if len(body) > 4096 {
			http.Error(w, "too large for the test", http.StatusRequestEntityTooLarge)
			return
		}
		mu.Lock()
		got[r.Header.Get("X-Message-Id")]++
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return copySink{yaml: fmt.Sprintf("{name: s, kind: webhook, url: %q, timeout: 2s}", srv.URL), tooBig: 10_000,
		holding: func() map[string]int {
			mu.Lock()
			defer mu.Unlock()
			out := map[string]int{}
			for k, v := range got {
				out[k] = v
			}
			return out
		}}
}

func kafkaCopySink(t *testing.T) copySink {
	const topic = "copied"
	kc := kafkatest.Start(t, kfake.SeedTopics(2, topic), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
	return copySink{yaml: fmt.Sprintf("{name: s, kind: kafka, brokers: [%s], topic: %s, timeout: 2s}", strings.Join(kc.Addrs(), ", "), topic),
		tooBig: 10_000,
		holding: func() map[string]int {
			out := map[string]int{}
			for _, r := range kc.ReadAll(t, topic) {
				out[recordHeader(r, "id")]++
			}
			return out
		}}
}

func natsCopySink(t *testing.T) copySink {
	natsURL := natstest.Start(t) // skips without a NATS server
	prefix := natstest.Unique(t)
	natstest.CreateStream(t, natsURL, jetstream.StreamConfig{Name: prefix, Subjects: []string{prefix + ".>"}, Storage: jetstream.MemoryStorage})
	max := int(natstest.Connect(t, natsURL).MaxPayload())
	return copySink{yaml: fmt.Sprintf("{name: s, kind: nats, servers: [%q], subject: %q, stream: {name: %s}, ack_timeout: 2s}", natsURL, prefix+".{type}", prefix),
		tooBig: max + 1000,
		holding: func() map[string]int {
			out := map[string]int{}
			for _, m := range natstest.Read(t, natsURL, prefix) {
				out[m.Header.Get(natsjs.HeaderMsgID)]++
			}
			return out
		}}
}

func rabbitCopySink(t *testing.T) copySink {
	rabbitURL := rabbittest.Start(t) // skips without RabbitMQ
	rabbit := rabbittest.Declare(t, rabbitURL, rabbittest.Topology{})
	var mu sync.Mutex
	got := map[string]int{}
	return copySink{yaml: fmt.Sprintf("{name: s, kind: rabbitmq, url: %q, exchange: %q, max_message_bytes: 1024, timeout: 2s}", rabbitURL, rabbit.Exchange),
		tooBig: 2000,
		holding: func() map[string]int {
			mu.Lock()
			defer mu.Unlock()
			for _, d := range rabbittest.Drain(t, rabbitURL, rabbit.Queue) {
				got[d.MessageId]++
			}
			out := map[string]int{}
			for k, v := range got {
				out[k] = v
			}
			return out
		}}
}

func serviceBusCopySink(t *testing.T) copySink {
	sb := sbfake.Start(t) // skips without node
	queue := "copied"
	sb.CreateQueue(t, queue, sbfake.QueueOptions{MaxMessageSize: 64 << 10})
	c, err := azservicebus.NewClientFromConnectionString(sb.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	var mu sync.Mutex
	got := map[string]int{}
	return copySink{yaml: fmt.Sprintf("{name: s, kind: servicebus, connection_string: %q, queue: %s, timeout: 5s}", sb.ConnectionString(), queue),
		tooBig: 100 << 10,
		holding: func() map[string]int {
			mu.Lock()
			defer mu.Unlock()
			r, err := c.NewReceiverForQueue(queue, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close(context.Background())
			for {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				msgs, _ := r.ReceiveMessages(ctx, 500, nil)
				cancel()
				if len(msgs) == 0 {
					break
				}
				for _, m := range msgs {
					got[m.MessageID]++
				}
			}
			out := map[string]int{}
			for k, v := range got {
				out[k] = v
			}
			return out
		}}
}

// TestIntegrationCopyGroupCutByARefusalIsDeliveredWholeAfterTheRestart:
// for each broker kind, 200 rows written by one COPY, the 51st too large
// for the broker. The sink acknowledges the rows before it and refuses it
// (relay.on_refused: stop): the relay stops with the sink's progress in
// the middle of rows that share an LSN. The operator restarts with
// on_refused: dead_letter: the refused row is parked for that sink and
// every other row of the COPY reaches the broker (an LSN as the progress
// took the rest of the group for acknowledged: neither sent nor parked).
func TestIntegrationCopyGroupCutByARefusalIsDeliveredWholeAfterTheRestart(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		kind string
		sink func(*testing.T) copySink
	}{{"webhook", webhookCopySink}, {"kafka", kafkaCopySink}, {"nats", natsCopySink}, {"rabbitmq", rabbitCopySink},
		{"servicebus", serviceBusCopySink}} {
		t.Run(c.kind, func(t *testing.T) {
			t.Parallel() // each its own broker, outbox and slot
			sink := c.sink(t)
			url := pgtest.URL(t)
			ob := relaytest.NewOutbox(t, url)
			stopCfg := ob.Config(t, "  - "+sink.yaml, "relay: {batch_size: 10, retry_backoff: 200ms, shutdown_timeout: 2s}")
			dlq := relaytest.WithDeadLetterTable(t, url, stopCfg)
			parkCfg := ob.Config(t, "  - "+sink.yaml, "relay: {batch_size: 10, retry_backoff: 200ms, shutdown_timeout: 2s, on_refused: dead_letter, refused_attempts: 1}")
			addPostgres(t, parkCfg, "dead_letter_table: "+dlq)
			cdcInit(t, stopCfg)
			conn := pgtest.Connect(t, url)
			msgs := copyMsgs(200)
			big := &msgs[50]
			big.Payload = fmt.Sprintf(`{"n": 50, "pad": "%s"}`, strings.Repeat("x", sink.tooBig))
			ob.CopyTx(t, conn, msgs...)
			if lsns := ob.PendingInsertLSNList(t, conn); len(lsns) != 200 || lsns[49] != lsns[50] || lsns[50] != lsns[51] {
				t.Fatalf("the COPY's rows 50 to 52 are at %v, want one LSN", lsns[49:52])
			}

			p := startCDC(t, "run", "--config", stopCfg)
			if code := p.Wait(60 * time.Second); code != 1 || !strings.Contains(p.Stderr.String(), big.ID) {
				t.Fatalf("relay with a message the broker refuses: exit %d, want 1 naming %s\n%s", code, big.ID, p.Stderr.String())
			}
			held := sink.holding()
			if held[msgs[0].ID] == 0 || held[big.ID] != 0 {
				t.Fatalf("before the refusal the broker holds %d messages (first %v, refused one %v)", len(held), held[msgs[0].ID], held[big.ID])
			}

			p = startCDC(t, "run", "--config", parkCfg)
			var missing []string
			if !pgtest.WaitFor(60*time.Second, func() bool {
				held, missing = sink.holding(), nil
				for i, m := range msgs {
					if i != 50 && held[m.ID] == 0 {
						missing = append(missing, m.ID)
					}
				}
				return len(missing) == 0
			}) {
				t.Fatalf("after the restart the broker lacks %d of the COPY's 199 deliverable rows\n%s", len(missing), p.Stderr.String())
			}
			p.Stop(t)
			if rows := listParked(t, parkCfg); len(rows) != 1 || *rows[0].ID != big.ID || rows[0].Sink != "s" {
				t.Fatalf("parked %+v, want %s for sink s", rows, big.ID)
			}
		})
	}
}
