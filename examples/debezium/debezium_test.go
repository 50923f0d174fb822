// Package debezium_test runs walpost against the outbox table Debezium's
// outbox event router expects (outbox.sql) with this folder's cdc.yaml,
// verbatim, as a user replacing Debezium would: cdc init, then cdc run,
// relaying to Kafka (the in-process kfake broker, creating topics on
// first use as brokers with auto.create.topics.enable do).
package debezium_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
	"github.com/walpost/walpost/internal/relaytest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// event is one outbox row as the application wrote it, with the payload
// as PostgreSQL prints the jsonb it stored (what walpost and Debezium
// read from the WAL).
type event struct {
	id, aggregateType, aggregateID, typ, payload string
}

// aggregates are the (aggregatetype, aggregateid) pairs the test writes
// events for: two topics, three keys.
var aggregates = [][2]string{{"order", "1"}, {"order", "2"}, {"customer", "7"}}

// insertTx inserts events for the aggregates, n per transaction, in one
// transaction; with removeAfterInsert each row is deleted again in the
// same transaction, as Debezium's outbox example and its Quarkus
// extension do (the table stays empty; the INSERT is still in the WAL).
func insertTx(t *testing.T, conn *pgx.Conn, first, n int, removeAfterInsert bool) []event {
	t.Helper()
	ctx := context.Background()
	var evs []event
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for i := first; i < first+n; i++ {
			agg := aggregates[i%len(aggregates)]
			e := event{id: uuid.NewString(), aggregateType: agg[0], aggregateID: agg[1], typ: fmt.Sprintf("%sEvent%d", agg[0], i)}
			body := fmt.Sprintf(`{"seq": %d, "aggregateId": %q, "note": "ünïcode \"quoted\"", "lines": [{"qty": 2}]}`, i, agg[1])
			if err := tx.QueryRow(ctx, `INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, payload) VALUES ($1, $2, $3, $4, $5::jsonb) RETURNING payload::text`,
				e.id, e.aggregateType, e.aggregateID, e.typ, body).Scan(&e.payload); err != nil {
				return err
			}
			if removeAfterInsert {
				if _, err := tx.Exec(ctx, `DELETE FROM outboxevent WHERE id = $1`, e.id); err != nil {
					return err
				}
			}
			evs = append(evs, e)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestIntegrationDebeziumOutboxReachesDebeziumsTopicsKeysValuesAndIDs: every
// event committed after cdc init, including rows deleted in their own
// transaction, lands once in topic outbox.event.<aggregatetype> (created
// on first use) with record key = aggregateid, value = the payload as
// PostgreSQL prints it, header id = the event id, on the partition the
// Java client's default partitioner picks for the key (so a Debezium
// setup with string keys put that aggregate there too), and in commit
// order per aggregate. No topic is made from the event's type column.
func TestIntegrationDebeziumOutboxReachesDebeziumsTopicsKeysValuesAndIDs(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	ddl, err := os.ReadFile("outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, url, string(ddl))
	conn := pgtest.Connect(t, url)

	kc := kafkatest.Start(t, kfake.AllowAutoTopicCreation())
	env := []string{"DATABASE_URL=" + url, "KAFKA_BROKER=" + kc.Addrs()[0], "CDC_HTTP_LISTEN=127.0.0.1:0"}
	cdc := relaytest.BuildCDC(t)
	code, out, errOut := relaytest.Run(t, cdc, env, "init", "--config", "cdc.yaml")
	if code != 0 {
		t.Fatalf("cdc init exited %d\n%s%s", code, out, errOut)
	}
	t.Cleanup(func() {
		// A killed relay's WAL sender may hold the slot a moment longer.
		pgtest.WaitFor(10*time.Second, func() bool {
			_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot('walpost_outbox')")
			return err == nil
		})
	})

	// Events committed while the relay is not running yet (the slot
	// keeps them), then more while it runs.
	var want []event
	want = append(want, insertTx(t, conn, 0, 5, false)...)
	want = append(want, insertTx(t, conn, 5, 5, true)...)
	relay := relaytest.StartCDC(t, cdc, env, "run", "--config", "cdc.yaml")
	for tx := range 5 { // every other one removes its rows again
		want = append(want, insertTx(t, conn, 10+6*tx, 6, tx%2 == 1)...)
	}

	byTopic := map[string][]event{}
	for _, e := range want {
		byTopic["outbox.event."+e.aggregateType] = append(byTopic["outbox.event."+e.aggregateType], e)
	}
	if !pgtest.WaitFor(60*time.Second, func() bool {
		for topic, evs := range byTopic {
			var n int64
			for _, pi := range kc.PartitionInfos(topic) {
				n += pi.HighWatermark
			}
			if n < int64(len(evs)) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("not every event reached Kafka\nrelay:\n%s", relay.Stderr.String())
	}
	relay.Stop(t)

	javaDefault := kgo.StickyKeyPartitioner(nil) // murmur2 of the key bytes, as the Java producer (and Kafka Connect) partitions
	for topic, evs := range byTopic {
		recs := kc.ReadAll(t, topic)
		if len(recs) != len(evs) {
			t.Errorf("%s: %d records, want %d (each event once)", topic, len(recs), len(evs))
		}
		byID := map[string]event{}
		for _, e := range evs {
			byID[e.id] = e
		}
		partitions := len(kc.PartitionInfos(topic))
		got := map[string][]string{} // aggregateid -> event ids in offset order
		for _, r := range recs {
			id := header(r, "id")
			e, ok := byID[id]
			if !ok {
				t.Errorf("%s: record with header id %q is not an event of this topic", topic, id)
				continue
			}
			if string(r.Key) != e.aggregateID || string(r.Value) != e.payload {
				t.Errorf("%s: event %s: key %q value %s; want key %q value %s", topic, id, r.Key, r.Value, e.aggregateID, e.payload)
			}
			if p := javaDefault.ForTopic(topic).Partition(&kgo.Record{Key: r.Key}, partitions); int32(p) != r.Partition {
				t.Errorf("%s: key %q on partition %d; the Java default partitioner picks %d", topic, r.Key, r.Partition, p)
			}
			// Debezium's one header, id, and walpost's own: type, the
			// message type, here the aggregatetype.
			if typ := header(r, "type"); typ != e.aggregateType || len(r.Headers) != 2 {
				t.Errorf("%s: event %s: headers %v; want id and type %q only", topic, id, r.Headers, e.aggregateType)
			}
			got[e.aggregateID] = append(got[e.aggregateID], id)
		}
		for _, agg := range aggregates {
			if "outbox.event."+agg[0] != topic {
				continue
			}
			var order []string
			for _, e := range evs {
				if e.aggregateID == agg[1] {
					order = append(order, e.id)
				}
			}
			if fmt.Sprint(got[agg[1]]) != fmt.Sprint(order) {
				t.Errorf("%s: aggregate %s: events in the order %v, committed in the order %v", topic, agg[1], got[agg[1]], order)
			}
		}
		t.Logf("%s: %d records on %d partitions", topic, len(recs), partitions)
	}
	for _, e := range want[:3] {
		if kc.PartitionInfos("outbox.event."+e.typ) != nil || kc.PartitionInfos(e.typ) != nil {
			t.Errorf("a topic was made from the event type %q", e.typ)
		}
	}
}

// header returns the value of r's header named key ("" when absent); a
// second header of that name is an error.
func header(r *kgo.Record, key string) string {
	v, n := "", 0
	for _, h := range r.Headers {
		if h.Key == key {
			v, n = string(h.Value), n+1
		}
	}
	if n > 1 {
		return fmt.Sprintf("<%d headers %q>", n, key)
	}
	return v
}
