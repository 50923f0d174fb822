package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest/rdkafkamock"
	"github.com/walpost/walpost/internal/relaytest"
)

// TestIntegrationKafkaExactlyOnceUnderFaults: a producer commits keyed
// sequences while two `cdc run` processes share one config (one streams,
// the other waits for the slot: a second instance on the same config),
// with two Kafka sinks on one broker: "plain" (the idempotent producer)
// and "eos" (exactly_once). Faults come at random: kill -9 of the active
// relay, usually in the middle of a batch (a new standby replaces it, so
// each is also a takeover), and the broker off the network (every
// connection reset, new ones refused) for up to 3 s. Then: every committed
// message is in both topics, in per-key order, and a read_committed
// consumer of the exactly_once topic sees each message once. The plain
// sink's duplicates are reported for comparison.
func TestIntegrationKafkaExactlyOnceUnderFaults(t *testing.T) {
	t.Parallel()
	kafkaUnderFaults(t, kafkatest.Start(t, kfake.SeedTopics(3, "plain", "eos")), "", true, 15*time.Second)
}

// TestIntegrationKafkaUnderFaultsOnLibrdkafkaMock runs the same faults
// against librdkafka's mock cluster (three brokers), a Kafka implementation
// by other authors than the sink's producer (docs/testing.md, "Kafka: two
// implementations"): every committed message in both topics, in per-key
// order, through the idempotent producer. The exactly_once sink is not
// run here: the mock aborts nothing (an aborted transaction's records,
// its progress record among them, stay visible to read_committed), so
// what a kill -9 in the middle of a transaction leaves would be taken
// for committed; kfake's run checks exactly_once.
func TestIntegrationKafkaUnderFaultsOnLibrdkafkaMock(t *testing.T) {
	t.Parallel()
	kc := rdkafkamock.Start(t, 3, map[string]int{"plain": 3})
	kafkaUnderFaults(t, kc, fmt.Sprintf("protocol_version: %q, ", rdkafkamock.ProtocolVersion), false, 8*time.Second)
}

// kafkaCluster is what kafkaUnderFaults needs of a Kafka cluster.
type kafkaCluster interface {
	Addrs() []string
	Outage(testing.TB) (restore func())
	ReadAll(testing.TB, string) []*kgo.Record
	ReadCommitted(testing.TB, string) []*kgo.Record
}

// kafkaUnderFaults is TestIntegrationKafkaExactlyOnceUnderFaults on kc,
// with extra added to the sinks' settings, for duration; eos says whether
// the exactly_once sink runs too.
func kafkaUnderFaults(t *testing.T, kc kafkaCluster, extra string, eos bool, duration time.Duration) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	t.Logf("seed %d, %v of faults", seed, duration)

	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	brokers := strings.Join(kc.Addrs(), ", ")
	sinks := fmt.Sprintf("  - {name: plain, kind: kafka, brokers: [%s], topic: plain, %stimeout: 2s}", brokers, extra)
	if eos {
		sinks += fmt.Sprintf("\n  - {name: eos, kind: kafka, brokers: [%s], topic: eos, %stimeout: 2s, exactly_once: true, progress_topic: walpost.progress}",
			brokers, extra)
	}
	cfg := ob.Config(t, sinks, "relay: {batch_size: 100, shutdown_timeout: 10s, retry_backoff: 1s}")
	cdcInit(t, cfg)

	type relay struct {
		p      *proc
		listen string
	}
	var relays []*relay
	start := func() {
		port, _ := pgtest.FreePort()
		listen := fmt.Sprintf("127.0.0.1:%d", port)
		relays = append(relays, &relay{startCDCEnv(t, []string{"CDC_HTTP_LISTEN=" + listen}, "run", "--config", cfg), listen})
	}
	logs := func() string {
		var b strings.Builder
		for _, r := range relays {
			b.WriteString(r.p.Stderr.String())
		}
		return b.String()
	}
	active := func() *relay {
		var a *relay
		pgtest.WaitFor(60*time.Second, func() bool {
			for _, r := range relays {
				if !r.p.Exited() && readyz(r.listen) == http.StatusOK {
					a = r
					return true
				}
			}
			return false
		})
		if a == nil {
			t.Fatalf("no relay streams\n%s", logs())
		}
		return a
	}
	start()
	start()
	prod := ob.StartProducer(t, 16, 2*time.Millisecond)

	counts := map[string]int{}
	for end := time.Now().Add(duration); time.Now().Before(end); {
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		a := active()
		switch kind := []string{"kill -9", "kafka outage"}[rng.IntN(2)]; kind {
		case "kill -9":
			counts[kind]++
			a.p.Kill9(t)
			for i, r := range relays {
				if r == a {
					relays = append(relays[:i], relays[i+1:]...)
					break
				}
			}
			start()
		case "kafka outage":
			counts[kind]++
			restore := kc.Outage(t)
			time.Sleep(time.Duration(300+rng.IntN(2700)) * time.Millisecond)
			restore()
		}
	}
	prod.Stop()
	conn := pgtest.Connect(t, url)
	committed := prod.Committed(t, conn)

	lines := func(read func(testing.TB, string) []*kgo.Record, topic string) []relaytest.Line {
		var out []relaytest.Line
		for _, r := range read(t, topic) {
			out = append(out, relaytest.Line{ID: recordHeader(r, "id"), Type: recordHeader(r, "type")})
		}
		return out
	}
	if !pgtest.WaitFor(120*time.Second, func() bool {
		return relaytest.AllDelivered(committed, lines(kc.ReadAll, "plain")) &&
			(!eos || relaytest.AllDelivered(committed, lines(kc.ReadCommitted, "eos")))
	}) {
		t.Logf("relays:\n%s", logs())
	}
	plain := relaytest.CheckDelivered(t, "plain", committed, lines(kc.ReadAll, "plain"))
	if !eos {
		t.Logf("%d messages committed; faults: kill -9 ×%d, kafka outage ×%d; duplicates (idempotent producer): %d",
			len(committed), counts["kill -9"], counts["kafka outage"], plain.Duplicates)
		return
	}
	copies := relaytest.CheckDelivered(t, "eos", committed, lines(kc.ReadCommitted, "eos"))
	if copies.Duplicates != 0 {
		t.Errorf("exactly_once: a read_committed consumer saw %d duplicates", copies.Duplicates)
	}
	t.Logf("%d messages committed; faults: kill -9 ×%d, kafka outage ×%d; duplicates: plain (idempotent producer) %d, exactly_once (read_committed) %d",
		len(committed), counts["kill -9"], counts["kafka outage"], plain.Duplicates, copies.Duplicates)
}

// TestIntegrationKafkaExactlyOnceForgedProgressRecordSkipsNothing: a
// client that may write the progress topic produces one plain record of
// the sink's key at commit LSN FFFFFFF0/0 while the relay is stopped.
// The next `cdc run` refuses it (the sink's own transactional producer did
// not write it), says so in its log and `cdc status` says so too, resumes
// from the progress table, and a read_committed consumer sees every row
// committed after the real position (docs/security.md, "Progress topic").
func TestIntegrationKafkaExactlyOnceForgedProgressRecordSkipsNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	kc := kafkatest.Start(t, kfake.SeedTopics(2, "eos"))
	sinks := fmt.Sprintf("  - {name: eos, kind: kafka, brokers: [%s], topic: eos, timeout: 2s, exactly_once: true}", strings.Join(kc.Addrs(), ", "))
	cfg := ob.Config(t, sinks, "")
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	var all []relaytest.Msg
	insert := func(n int) {
		var msgs []relaytest.Msg
		for i := range n {
			msgs = append(msgs, relaytest.NewMsg("order.created", fmt.Sprintf("k%d", i%3), len(all)+i))
		}
		ob.InsertTx(t, conn, msgs...)
		all = append(all, msgs...)
	}
	delivered := func() (missing, copies int) {
		seen := map[string]int{}
		for _, r := range kc.ReadCommitted(t, "eos") {
			seen[recordHeader(r, "id")]++
		}
		for _, m := range all {
			switch n := seen[m.ID]; {
			case n == 0:
				missing++
			case n > 1:
				copies += n - 1
			}
		}
		return missing, copies
	}

	insert(20)
	p := startCDC(t, "run", "--config", cfg)
	if !pgtest.WaitFor(30*time.Second, func() bool { m, _ := delivered(); return m == 0 }) {
		t.Fatalf("the first rows did not reach Kafka\n%s", p.Logs())
	}
	p.Stop(t)

	// Anyone with WRITE on the topic: no transaction, no transactional id.
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	forged := &kgo.Record{Topic: "walpost.progress", Key: []byte(ob.Slot + "/eos"),
		Value: []byte(fmt.Sprintf(`{"slot":%q,"sink":"eos","commit_lsn":"FFFFFFF0/0","lsn":"FFFFFFF0/0","seq":0}`, ob.Slot))}
	if err := cl.ProduceSync(context.Background(), forged).FirstErr(); err != nil {
		t.Fatal(err)
	}
	_, status, _ := cdc(t, nil, "status", "--config", cfg)
	if !strings.Contains(status, "forged progress record") {
		t.Errorf("cdc status does not report the forged progress record:\n%s", status)
	}

	insert(20)
	p = startCDC(t, "run", "--config", cfg)
	if !pgtest.WaitFor(30*time.Second, func() bool { m, _ := delivered(); return m == 0 }) {
		missing, _ := delivered()
		t.Fatalf("%d of the %d rows committed after the forged record never reached Kafka\n%s", missing, 20, p.Logs())
	}
	p.Stop(t)
	if _, copies := delivered(); copies != 0 {
		t.Errorf("read_committed sees %d copies", copies)
	}
	if logs := p.Stderr.String(); !strings.Contains(logs, "forged progress record") || !strings.Contains(logs, `"offset":`) {
		t.Errorf("the relay did not report the forged progress record:\n%s", p.Logs())
	}
}
