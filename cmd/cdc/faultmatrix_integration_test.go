package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
	"github.com/walpost/walpost/internal/publish/natsjs"
	"github.com/walpost/walpost/internal/publish/natsjs/natstest"
	"github.com/walpost/walpost/internal/publish/rabbitmq/rabbittest"
	"github.com/walpost/walpost/internal/publish/servicebus/sbfake"
	"github.com/walpost/walpost/internal/publish/sns/snsfake"
	"github.com/walpost/walpost/internal/publish/sqs/sqsfake"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/internal/tcpproxy"
)

// The fault matrix (docs/testing.md, "The fault matrix"): every guarantee
// checked under every fault, for every sink family, through the cdc
// binary with a config file. A fault kind is injected from outside the
// relay; the guarantees are checked on what the brokers hold at the end
// (and sent_at while the faults go on).
const (
	faultKill9       = "kill9"              // kill -9 of the streaming relay, restarted
	faultKill9MidTx  = "kill9-midtx"        // the same while a big transaction is partly delivered
	faultSIGTERM     = "sigterm"            // SIGTERM of the streaming relay (exit 0), restarted
	faultWALSender   = "walsender-midtx"    // pg_terminate_backend of its WAL sender mid-transaction
	faultSIGSTOP     = "sigstop-midtx"      // SIGSTOP of the relay mid-transaction past wal_sender_timeout, then SIGCONT
	faultPGImmediate = "pg-immediate-midtx" // pg_ctl restart -m immediate mid-transaction
	faultPGFast      = "pg-fast"            // pg_ctl restart -m fast
	faultOutage      = "broker-outage"      // the broker off the network for 1-2.5 s (refused, reset)
	faultCut         = "broker-cut"         // every connection to the broker reset once
	faultStandby     = "standby-takeover"   // a second instance on the same config waits, the first is killed, it takes over
	faultTooLarge    = "refused-too-large"  // a row larger than the broker takes (on_refused: hold_key)
	faultNoDest      = "refused-no-dest"    // a row whose templated destination does not exist (on_refused: hold_key)
)

// faultKinds is every fault kind, in the order the docs list them.
var faultKinds = []string{faultKill9, faultKill9MidTx, faultSIGTERM, faultWALSender, faultSIGSTOP, faultPGImmediate,
	faultPGFast, faultOutage, faultCut, faultStandby, faultTooLarge, faultNoDest}

// pendingCells are the cells (family/fault) known to fail on main, with
// why; they are left out of a run unless WALPOST_FAULT_PENDING=1. When the
// fix lands, delete the lines: the cells then run in every make test.
// (The kafka-eos cells of a connection lost mid-transaction and every
// family's refused-no-dest were pending until branch stream's fixes of
// issue 43.1 and of hold_key across destinations reached main; every
// family's pg-fast with columns.sent_at until branch pgfast's fix: the
// relay now ends the cycle when its marks find the server stopping.)
var pendingCells = map[string]string{}

// pendingCell returns why the cell of family and fault kind is pending,
// or "".
func pendingCell(family, kind string) string {
	if why := pendingCells[family+"/"+kind]; why != "" {
		return why
	}
	return pendingCells["*/"+kind]
}

// faultFamily is one sink family's side of the matrix: its sinks and how
// to read back, count and cut them.
type faultFamily struct {
	// sinks is the config's sink list (items indented by two spaces);
	// where the sink takes a template, every destination is one on
	// {type}, with a destination for "torture" and "held" and none for
	// "missing" (the webhook's URL is not a template).
	sinks string
	// read returns what a sink holds, in order (per partition for Kafka),
	// each message as a Line with ID and Type; exactly-once sinks are read
	// read_committed.
	read map[string]func(t *testing.T) []relaytest.Line
	// exactlyOnce names the sinks that must hold each message once.
	exactlyOnce map[string]bool
	// count is a cheap count of what the family's sinks hold (only to see
	// a big transaction partly delivered).
	count func() int
	// outage takes the broker off the network (nil: the family has no
	// broker); the returned function brings it back.
	outage func() (restore func())
	// tooBig is the payload size the sinks refuse (0: they refuse none).
	tooBig int
	// noDest: the sinks refuse a row whose destination does not exist.
	noDest bool
}

// faultFamilies are the sink families of the matrix. Each start skips the
// family when its broker cannot be had.
var faultFamilies = []struct {
	name  string
	start func(t *testing.T) *faultFamily
	// longOnly: run by make torture (and when WALPOST_FAULT_SINKS names
	// it), not by make test, which must stay short.
	longOnly bool
}{
	{"rabbitmq", rabbitFaultFamily, false}, // the slowest first: the families start four at a time
	{"nats", natsFaultFamily, false},
	{"servicebus", serviceBusFaultFamily, false},
	{"file", fileFaultFamily, false},
	{"kafka", func(t *testing.T) *faultFamily { return kafkaFaultFamily(t, false) }, false},
	{"kafka-eos", func(t *testing.T) *faultFamily { return kafkaFaultFamily(t, true) }, false},
	{"sqs", sqsFaultFamily, false},
	{"webhook", webhookFaultFamily, false},
	{"sns", snsFaultFamily, true},
	{"pubsub", pubsubFaultFamily, true},
}

func fileFaultFamily(t *testing.T) *faultFamily {
	out := filepath.Join(t.TempDir(), "out.jsonl")
	lc := relaytest.NewLineCounter(out)
	return &faultFamily{
		sinks: fmt.Sprintf("  - {name: file, kind: file, path: %s}", out),
		read: map[string]func(*testing.T) []relaytest.Line{"file": func(t *testing.T) []relaytest.Line {
			// Whole lines only: the relay may be mid-write.
			b, _ := os.ReadFile(out)
			return relaytest.ParseLines(t, string(b[:strings.LastIndexByte(string(b), '\n')+1]))
		}},
		count: lc.Count,
	}
}

// kafkaFaultFamily: a kfake cluster of its own (message.max.bytes 128 KiB)
// with topics "torture" and "held"; topic template "{type}". With eos, the
// sink is exactly_once and read read_committed.
func kafkaFaultFamily(t *testing.T, eos bool) *faultFamily {
	kc := kafkatest.Start(t, kfake.SeedTopics(3, "torture", "held"), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "131072"}))
	name, extra, read := "kafka", "", kc.ReadAll
	if eos {
		name, extra, read = "eos", ", exactly_once: true, progress_topic: walpost.progress", kc.ReadCommitted
	}
	return &faultFamily{
		sinks: fmt.Sprintf("  - {name: %s, kind: kafka, brokers: [%s], topic: '{type}', timeout: 2s%s}", name, strings.Join(kc.Addrs(), ", "), extra),
		read: map[string]func(*testing.T) []relaytest.Line{name: func(t *testing.T) []relaytest.Line {
			var lines []relaytest.Line
			for _, topic := range []string{"torture", "held"} {
				for _, r := range read(t, topic) {
					lines = append(lines, relaytest.Line{ID: recordHeader(r, "id"), Type: recordHeader(r, "type")})
				}
			}
			return lines
		}},
		exactlyOnce: map[string]bool{name: eos},
		count: func() int {
			n := 0
			for _, topic := range []string{"torture", "held"} {
				for _, p := range kc.PartitionInfos(topic) {
					n += int(p.HighWatermark)
				}
			}
			return n
		},
		outage: func() func() { return kc.Outage(t) },
		tooBig: 200 << 10,
		noDest: true,
	}
}

// natsFaultFamily: a stream of its own on the machine's NATS server over
// "<prefix>.torture" and "<prefix>.held", reached through a tcpproxy;
// subject template "<prefix>.{type}".
func natsFaultFamily(t *testing.T) *faultFamily {
	natsURL := natstest.Start(t) // skips without a NATS server
	prefix := natstest.Unique(t)
	natstest.CreateStream(t, natsURL, jetstream.StreamConfig{Name: prefix, Subjects: []string{prefix + ".torture", prefix + ".held"}, Storage: jetstream.MemoryStorage})
	max := int(natstest.Connect(t, natsURL).MaxPayload())
	proxy := faultProxy(t, strings.TrimPrefix(natsURL, "nats://"))
	js := natstest.JetStream(t, natsURL)
	return &faultFamily{
		sinks: fmt.Sprintf("  - {name: nats, kind: nats, servers: [%q], subject: %q, ack_timeout: 2s}", "nats://"+proxy.Addr(), prefix+".{type}"),
		read: map[string]func(*testing.T) []relaytest.Line{"nats": func(t *testing.T) []relaytest.Line {
			var lines []relaytest.Line
			for _, m := range natstest.Read(t, natsURL, prefix) {
				lines = append(lines, relaytest.Line{ID: m.Header.Get(natsjs.HeaderMsgID), Type: strings.TrimPrefix(m.Subject, prefix+".")})
			}
			return lines
		}},
		count: func() int {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := js.Stream(ctx, prefix)
			if err != nil {
				return 0
			}
			info, err := st.Info(ctx)
			if err != nil {
				return 0
			}
			return int(info.State.Msgs)
		},
		outage: func() func() { proxy.Cut(); return func() { proxy.Restore() } },
		tooBig: max + 1000,
		noDest: true,
	}
}

// rabbitFaultFamily: exchanges "<base>.torture" and "<base>.held" on the
// machine's RabbitMQ bound to one queue of the test's own, reached through
// a tcpproxy; exchange template "<base>.{type}", max_message_bytes 64 KiB.
func rabbitFaultFamily(t *testing.T) *faultFamily {
	rabbitURL := rabbittest.Start(t) // skips without RabbitMQ
	base := rabbittest.Name("walpost.test.fm")
	top := rabbittest.Declare(t, rabbitURL, rabbittest.Topology{Exchange: base + ".torture"})
	held := base + ".held"
	rabbittest.With(t, rabbitURL, func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(held, amqp.ExchangeTopic, true, true, false, false, nil); err != nil {
			return err
		}
		return ch.QueueBind(top.Queue, "#", held, false, nil)
	})
	t.Cleanup(func() { rabbittest.DeleteExchange(t, rabbitURL, held) })
	u, err := url.Parse(rabbitURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultProxy(t, u.Host)
	u.Host = proxy.Addr()
	// A consumer of the test's own takes what the queue receives; a read
	// publishes a marker to the queue and waits for it, so that it returns
	// everything the queue held before the read (a queue is FIFO).
	conn, err := amqp.Dial(rabbitURL)
	if err != nil {
		t.Fatalf("rabbitmq: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("rabbitmq: %v", err)
	}
	deliveries, err := ch.Consume(top.Queue, "", true, true, false, false, nil)
	if err != nil {
		t.Fatalf("rabbitmq: consuming %s: %v", top.Queue, err)
	}
	var mu sync.Mutex // guards markers
	var got heardLines
	markers := map[string]chan struct{}{}
	go func() {
		for d := range deliveries {
			mu.Lock()
			c, ok := markers[d.MessageId]
			mu.Unlock()
			if ok {
				close(c)
			} else {
				got.add(relaytest.Line{ID: d.MessageId, Type: strings.TrimPrefix(d.Exchange, base+".")})
			}
		}
	}()
	read := func(t *testing.T) []relaytest.Line {
		id := "marker-" + rabbittest.Name("fm")
		seen := make(chan struct{})
		mu.Lock()
		markers[id] = seen
		mu.Unlock()
		if err := ch.Publish("", top.Queue, false, false, amqp.Publishing{MessageId: id}); err != nil {
			t.Fatalf("rabbitmq: publishing a marker: %v", err)
		}
		select {
		case <-seen:
		case <-time.After(30 * time.Second):
			t.Fatalf("rabbitmq: the marker did not come back through queue %s within 30 s", top.Queue)
		}
		return got.read(t)
	}
	return &faultFamily{
		sinks:  fmt.Sprintf("  - {name: rabbitmq, kind: rabbitmq, url: %q, exchange: %q, max_message_bytes: 65536, timeout: 2s}", u.String(), base+".{type}"),
		read:   map[string]func(*testing.T) []relaytest.Line{"rabbitmq": read},
		count:  got.count,
		outage: func() func() { proxy.Cut(); return func() { proxy.Restore() } },
		tooBig: 100 << 10,
		noDest: true,
	}
}

// sqsFaultFamily: the SQS stand-in in the test process with queues
// "torture" and "held" (MaximumMessageSize 64 KiB); queue template
// "{type}". Its outage is the stand-in stopped (every connection closed,
// mid-batch too) and started again on its port.
func sqsFaultFamily(t *testing.T) *faultFamily {
	srv := sqsfake.Start(t)
	for _, q := range []string{"torture", "held"} {
		srv.CreateQueue(q, sqsfake.QueueOptions{MaxMessageSize: 64 << 10})
	}
	read := func(*testing.T) []relaytest.Line {
		return append(sqsLines(srv, "torture"), sqsLines(srv, "held")...)
	}
	return &faultFamily{
		sinks: fmt.Sprintf("  - {name: sqs, kind: sqs, queue: '{type}', region: us-east-1, endpoint: %q, max_message_bytes: 65536, max_retries: 0, timeout: 5s}", srv.URL()),
		read:  map[string]func(*testing.T) []relaytest.Line{"sqs": read},
		count: func() int { return len(srv.Messages("torture")) + len(srv.Messages("held")) },
		outage: func() func() {
			srv.Stop()
			return func() {
				if err := srv.Start(); err != nil {
					t.Errorf("starting the SQS stand-in again: %v", err)
				}
			}
		},
		tooBig: 100 << 10,
		noDest: true,
	}
}

// snsFaultFamily: the SNS stand-in in the test process with topics
// "torture" and "held"; topic template "…:{type}", max_message_bytes
// 64 KiB. Its outage is the stand-in stopped and started again.
func snsFaultFamily(t *testing.T) *faultFamily {
	srv := snsfake.Start(t)
	for _, tp := range []string{"torture", "held"} {
		srv.CreateTopic(tp)
	}
	return &faultFamily{
		sinks: fmt.Sprintf("  - {name: sns, kind: sns, topic_arn: %q, endpoint: %q, max_message_bytes: 65536, max_retries: 0, timeout: 5s}", snsfake.ARN("{type}"), srv.URL()),
		read: map[string]func(*testing.T) []relaytest.Line{"sns": func(*testing.T) []relaytest.Line {
			return append(snsLines(srv, "torture"), snsLines(srv, "held")...)
		}},
		count: func() int { return srv.Count("torture") + srv.Count("held") },
		outage: func() func() {
			srv.Stop()
			return func() {
				if err := srv.Start(); err != nil {
					t.Errorf("starting the SNS stand-in again: %v", err)
				}
			}
		},
		tooBig: 100 << 10,
		noDest: true,
	}
}

// pubsubFaultFamily: pstest, the Pub/Sub module's fake, in the test
// process with topics "fm-torture" and "fm-held", reached through a
// tcpproxy; topic template "fm-{type}". Pub/Sub takes messages up to
// 10 MB and the sink has no lower limit: no refused-too-large.
func pubsubFaultFamily(t *testing.T) *faultFamily {
	srv, _ := startPstest(t, "fm-torture", "fm-held")
	proxy := faultProxy(t, srv.Addr)
	read := func(*testing.T) []relaytest.Line {
		return append(pubsubLines(srv, "fm-torture"), pubsubLines(srv, "fm-held")...)
	}
	return &faultFamily{
		sinks:  fmt.Sprintf("  - {name: pubsub, kind: pubsub, project: %s, topic: %q, emulator_host: %q, timeout: 5s}", pubsubProject, "fm-{type}", proxy.Addr()),
		read:   map[string]func(*testing.T) []relaytest.Line{"pubsub": read},
		count:  func() int { return len(srv.Messages()) },
		outage: func() func() { proxy.Cut(); return func() { proxy.Restore() } },
		noDest: true,
	}
}

// serviceBusFaultFamily: the Service Bus stand-in (sbfake, Node.js) with
// queues "torture" and "held" taking at most 64 KiB, reached through the
// stand-in's tcpproxy; entity template "{type}" (a templated entity that
// does not exist is refused: docs/sinks/servicebus.md). Read by peeking
// each queue in sequence order; its outage is the proxy cut.
func serviceBusFaultFamily(t *testing.T) *faultFamily {
	sb := sbfake.Start(t) // skips without node
	queues := []string{"torture", "held"}
	for _, q := range queues {
		sb.CreateQueue(t, q, sbfake.QueueOptions{MaxMessageSize: 64 << 10})
	}
	// The reader goes through the proxy too: after a cut it reconnects
	// at once rather than after the SDK's default 4 s.
	c, err := azservicebus.NewClientFromConnectionString(sb.ConnectionString(), &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 20, RetryDelay: 50 * time.Millisecond, MaxRetryDelay: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) }) // and its receivers
	// A receiver per queue, for peeking. Peeked messages are kept: each
	// read peeks from the sequence number after the last one it saw, up
	// to a peek that finds fewer than it asked for: past what the queue
	// held when the read began (the producer does not pause, so a read
	// waiting for an empty peek would chase it).
	receivers := map[string]*azservicebus.Receiver{}
	for _, q := range queues {
		r, err := c.NewReceiverForQueue(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		receivers[q] = r
	}
	var mu sync.Mutex
	got := map[string][]relaytest.Line{}
	next := map[string]int64{}
	read := func(t *testing.T) []relaytest.Line {
		mu.Lock()
		defer mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var lines []relaytest.Line
		for _, q := range queues {
			for {
				const page = 250
				from := next[q]
				msgs, err := receivers[q].PeekMessages(ctx, page, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
				if err != nil {
					t.Fatalf("servicebus: peeking %s from sequence number %d: %v", q, from, err)
				}
				for _, m := range msgs {
					l := relaytest.Line{ID: m.MessageID}
					if m.Subject != nil {
						l.Type = *m.Subject
					}
					got[q] = append(got[q], l)
				}
				if len(msgs) > 0 {
					next[q] = *msgs[len(msgs)-1].SequenceNumber + 1
				}
				if len(msgs) < page {
					break
				}
			}
			lines = append(lines, got[q]...)
		}
		return lines
	}
	return &faultFamily{
		sinks:  fmt.Sprintf("  - {name: servicebus, kind: servicebus, connection_string: %q, entity: '{type}', timeout: 5s}", sb.ConnectionString()),
		read:   map[string]func(*testing.T) []relaytest.Line{"servicebus": read},
		count:  func() int { return sb.Stats(t, "torture").Stored + sb.Stats(t, "held").Stored },
		outage: func() func() { return sb.Outage(t) },
		tooBig: 100 << 10,
		noDest: true,
	}
}

// webhookFaultFamily: an HTTP endpoint of the test's own behind a
// tcpproxy, sent to with concurrency: 4 (each key's messages one request
// at a time, in order: docs/sinks/webhook.md). It answers 413 to a body
// over 64 KiB, which the sink's contract makes a refusal. Its URL is not a
// template, so the "held" rows go to the same endpoint and no row can name
// a destination that does not exist (a 404 stops the relay, it refuses no
// message): no refused-no-dest. Read in the order the endpoint took the
// requests it answered 2xx.
func webhookFaultFamily(t *testing.T) *faultFamily {
	var got heardLines
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if len(body) > 64<<10 {
			http.Error(w, "larger than the fault matrix's endpoint takes", http.StatusRequestEntityTooLarge)
			return
		}
		got.add(relaytest.Line{ID: r.Header.Get("X-Message-Id"), Type: r.Header.Get("X-Message-Type")})
	}))
	t.Cleanup(srv.Close)
	proxy := faultProxy(t, srv.Listener.Addr().String())
	return &faultFamily{
		sinks:  fmt.Sprintf("  - {name: webhook, kind: webhook, url: %q, concurrency: 4, timeout: 2s}", "http://"+proxy.Addr()+"/hook"),
		read:   map[string]func(*testing.T) []relaytest.Line{"webhook": got.read},
		count:  got.count,
		outage: func() func() { proxy.Cut(); return func() { proxy.Restore() } },
		tooBig: 100 << 10,
	}
}

// heardLines are the messages a family's own consumer or endpoint took,
// in order; safe for concurrent use.
type heardLines struct {
	mu    sync.Mutex
	lines []relaytest.Line
}

func (h *heardLines) add(l relaytest.Line) {
	h.mu.Lock()
	h.lines = append(h.lines, l)
	h.mu.Unlock()
}

// read returns a copy of what was taken so far (a faultFamily read).
func (h *heardLines) read(*testing.T) []relaytest.Line {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.lines)
}

func (h *heardLines) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.lines)
}

// faultProxy is a tcpproxy to target, closed when the test ends.
func faultProxy(t *testing.T, target string) *tcpproxy.Proxy {
	p, err := tcpproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// faultSettings is what a run of the matrix does: WALPOST_FAULTS is
// "short" (default: each fault kind once per family, in a random order),
// "long" (random faults for 5 minutes per family) or a duration (random
// faults that long); WALPOST_FAULT_SEED replays a run's choices;
// WALPOST_FAULT_KINDS and WALPOST_FAULT_SINKS (comma-separated) narrow it
// to some fault kinds and families; WALPOST_FAULT_PENDING=1 runs the
// pending cells too; WALPOST_FAULT_SENT_AT=off leaves columns.sent_at
// unmapped (no sent_at check), which lets the pg-fast cells run.
type faultSettings struct {
	seed     uint64
	duration time.Duration // 0: each kind once
	kinds    []string
	families []string
	pending  bool
	sentAt   bool // columns.sent_at mapped (WALPOST_FAULT_SENT_AT=off unmaps it)
	bigRows  int  // rows of a big transaction
}

func faultSettingsFromEnv(t *testing.T) faultSettings {
	s := faultSettings{seed: uint64(time.Now().UnixNano()), kinds: faultKinds, bigRows: 2000, pending: os.Getenv("WALPOST_FAULT_PENDING") == "1",
		sentAt: os.Getenv("WALPOST_FAULT_SENT_AT") != "off"}
	switch v := os.Getenv("WALPOST_FAULTS"); v {
	case "", "short":
	case "long":
		s.duration, s.bigRows = 5*time.Minute, 30000
	default:
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("WALPOST_FAULTS=%q: want short, long or a duration", v)
		}
		s.duration, s.bigRows = d, 30000
	}
	if v := os.Getenv("WALPOST_FAULT_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("WALPOST_FAULT_SEED=%q: %v", v, err)
		}
		s.seed = seed
	}
	if v := os.Getenv("WALPOST_FAULT_KINDS"); v != "" {
		s.kinds = nil
		for _, k := range strings.Split(v, ",") {
			if !slices.Contains(faultKinds, k) {
				t.Fatalf("WALPOST_FAULT_KINDS: unknown fault kind %q (kinds: %s)", k, strings.Join(faultKinds, ", "))
			}
			s.kinds = append(s.kinds, k)
		}
	}
	if v := os.Getenv("WALPOST_FAULT_SINKS"); v != "" {
		s.families = strings.Split(v, ",")
	}
	return s
}

// faultCluster is the matrix's PostgreSQL cluster, shared by the
// families: a restart (one family's fault) is one more fault for the
// others, so restarts take the write lock and what must not meet one
// (setting up, the final reads) the read lock.
type faultCluster struct {
	*pgtest.Cluster
	mu sync.RWMutex
}

func (c *faultCluster) restart(t *testing.T, mode string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.Restart(mode); err != nil {
		t.Fatalf("pg_ctl restart -m %s: %v", mode, err)
	}
}

// TestIntegrationFaultMatrix: the fault harness. For each sink family, a
// producer commits keyed sequences (and rolls some transactions back)
// while `cdc run` streams with columns.sent_at mapped and on_refused:
// hold_key, and the fault kinds are injected from outside, each at least
// once per family (WALPOST_FAULTS=long: at random for 5 minutes). Then,
// per sink: nothing committed is lost, nothing rolled back is delivered,
// each key's first copies are in commit order (modulo whole replays), an
// exactly_once sink read read_committed holds each message once, a held
// key's messages after its refused one are parked and never delivered,
// and sent_at was never seen set on a row a sink did not hold yet. The
// seed is printed; WALPOST_FAULT_SEED replays a run's choices.
func TestIntegrationFaultMatrix(t *testing.T) {
	t.Parallel()
	s := faultSettingsFromEnv(t)
	t.Logf("seed %d (WALPOST_FAULT_SEED=%d replays it); faults: %s", s.seed, s.seed, map[bool]string{true: s.duration.String() + " at random", false: "each kind once"}[s.duration > 0])
	// A cluster of the matrix's own: it is restarted. A short
	// wal_sender_timeout ends the WAL sender of a stopped relay.
	cl := &faultCluster{Cluster: pgtest.StartCluster(t, pgtest.Options{Settings: []string{"wal_sender_timeout = 2s"}})}
	for i, f := range faultFamilies {
		if s.families != nil && !slices.Contains(s.families, f.name) || s.families == nil && f.longOnly && s.duration == 0 {
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(s.seed, uint64(i)))
			runFaultFamily(t, cl, f.name, f.start(t), s, rng)
		})
	}
}

// faultRelay is one `cdc run` of a family, with its own HTTP port.
type faultRelay struct {
	p      *proc
	listen string
}

// faultRelays are a family's running relays, on one config.
type faultRelays struct {
	t      *testing.T
	cfg    string
	relays []*faultRelay
	logs   strings.Builder // of the relays gone
	exits  []string        // the last log line of each relay that exited by itself
}

func (rs *faultRelays) start() *faultRelay {
	port, err := pgtest.FreePort()
	if err != nil {
		rs.t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	r := &faultRelay{startCDCEnv(rs.t, []string{"CDC_HTTP_LISTEN=" + listen}, "run", "--config", rs.cfg), listen}
	rs.relays = append(rs.relays, r)
	return r
}

// active returns the relay that streams (ready), waiting for one.
func (rs *faultRelays) active() *faultRelay {
	var a *faultRelay
	pgtest.WaitFor(60*time.Second, func() bool {
		rs.supervise()
		for _, r := range rs.relays {
			if !r.p.Exited() && readyz(r.listen) == http.StatusOK {
				a = r
				return true
			}
		}
		return false
	})
	if a == nil {
		rs.t.Fatalf("no relay streams within 60 s\n%s", rs.allLogs())
	}
	return a
}

// supervise starts a relay again that exited by itself, as a supervisor
// would (systemd's Restart=on-failure): cdc run exits 1 on some errors a
// server restart causes (the run's report lists them).
func (rs *faultRelays) supervise() {
	for _, r := range slices.Clone(rs.relays) {
		if r.p.Exited() {
			rs.exits = append(rs.exits, lastLine(r.p.Stderr.String()))
			rs.gone(r)
			rs.start()
		}
	}
}

// kill9 kills r with SIGKILL and, with again, starts a new relay in its
// place. A relay that exited meanwhile by itself is supervised instead.
func (rs *faultRelays) kill9(r *faultRelay, again bool) {
	if r.p.Exited() {
		rs.supervise()
		return
	}
	r.p.Kill9(rs.t)
	rs.gone(r)
	if again {
		rs.start()
	}
}

// gone drops a relay that ended.
func (rs *faultRelays) gone(r *faultRelay) {
	rs.relays = slices.DeleteFunc(rs.relays, func(x *faultRelay) bool { return x == r })
	fmt.Fprintf(&rs.logs, "--- relay pid %d\n%s", r.p.Cmd.Process.Pid, r.p.Stderr.String())
}

func (rs *faultRelays) allLogs() string {
	s := rs.logs.String()
	for _, r := range rs.relays {
		s += fmt.Sprintf("--- relay pid %d\n%s", r.p.Cmd.Process.Pid, r.p.Stderr.String())
	}
	if len(s) > 20000 {
		s = "…" + s[len(s)-20000:]
	}
	return s
}

// faultEvent is one injected fault, for the report.
type faultEvent struct {
	kind, note string
}

// heldSeq is a message of a held-key sequence: a "held" or "missing" row.
type heldSeq struct {
	id, key string
	seq     int
	refused bool // the row the sinks refuse
}

func runFaultFamily(t *testing.T, cl *faultCluster, name string, fam *faultFamily, s faultSettings, rng *rand.Rand) {
	var kinds []string
	for _, k := range s.kinds {
		switch {
		case fam.outage == nil && (k == faultOutage || k == faultCut),
			fam.tooBig == 0 && k == faultTooLarge,
			!fam.noDest && k == faultNoDest:
			continue // not for this family
		case pendingCell(name, k) != "" && !s.pending:
			t.Logf("cell %s/%s left out (pending; WALPOST_FAULT_PENDING=1 runs it): %s", name, k, pendingCell(name, k))
			continue
		}
		kinds = append(kinds, k)
	}
	url := cl.URL("postgres")
	// The cleanups registered by the setup below drop the outbox, slot and
	// dead-letter table: they run under the read lock (taken by a cleanup
	// registered after them, so run before them, once the relays are
	// gone), which this one, run after them, lets go.
	locked := false
	t.Cleanup(func() {
		if locked {
			cl.mu.RUnlock()
		}
	})
	cl.mu.RLock()
	ob := relaytest.NewOutbox(t, url)
	pgtest.Exec(t, url, "ALTER TABLE "+ob.Table+" ADD COLUMN sent_at timestamptz")
	cfg := ob.Config(t, fam.sinks, "relay: {batch_size: 100, shutdown_timeout: 10s, retry_backoff: 500ms, on_refused: hold_key, refused_attempts: 1}\n"+
		map[bool]string{true: "columns: {id: id, type: type, key: key, payload: payload, headers: headers, sent_at: sent_at}"}[s.sentAt])
	addPostgres(t, cfg, "reconnect_backoff: 1s", "standby_poll: 300ms")
	dlq := relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	cl.mu.RUnlock()
	ctx := context.Background()
	// A connection of the family's own, made again after a restart.
	var conn *pgx.Conn
	db := func() *pgx.Conn {
		if conn != nil && conn.Ping(ctx) == nil {
			return conn
		}
		pgtest.WaitFor(30*time.Second, func() bool {
			c, err := pgx.Connect(ctx, url)
			if err == nil {
				conn = c
			}
			return err == nil
		})
		if conn == nil {
			t.Fatal("cannot connect to the cluster")
		}
		return conn
	}
	t.Cleanup(func() {
		if conn != nil {
			conn.Close(ctx)
		}
	})

	rs := &faultRelays{t: t, cfg: cfg}
	t.Cleanup(func() { cl.mu.RLock(); locked = true })
	rs.start()
	prod := ob.StartProducer(t, 8, 10*time.Millisecond)
	stopRollbacks := rollBackNow(t, ob)
	t.Cleanup(stopRollbacks)

	var events []faultEvent
	var held []heldSeq // held-key rows, in commit order
	heldKeys := 0
	bigTxs := 0
	drainsCut := 0 // SIGTERMs that ended in exit 3
	var sentAtSeen, sentAtBad int
	// sentAtSample: the rows marked sent (read first) must all be held by
	// every sink (read after): marks come only after every ack.
	sentAtSample := func() {
		rows, err := db().Query(ctx, "SELECT id::text FROM "+ob.Table+" WHERE sent_at IS NOT NULL AND type = 'torture'")
		if err != nil {
			return // a restart: the next sample
		}
		marked, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return
		}
		for sink, read := range fam.read {
			has := map[string]bool{}
			for _, l := range read(t) {
				has[l.ID] = true
			}
			for _, id := range marked {
				if !has[id] {
					sentAtBad++
					t.Errorf("%s: row %s has sent_at set but sink %s does not hold it", name, id, sink)
					break
				}
			}
		}
		sentAtSeen = max(sentAtSeen, len(marked))
	}
	// bigTx commits a transaction of s.bigRows rows over 8 keys of its own
	// and calls fault once the sinks hold part of it; it returns what the
	// sinks held of it then.
	bigTx := func(fault func()) string {
		bigTxs++
		msgs := make([]relaytest.Msg, s.bigRows)
		for i := range msgs {
			key := fmt.Sprintf("big%d.%d", bigTxs, i%8)
			b, _ := json.Marshal(relaytest.Seq{Key: key, Seq: i/8 + 1})
			msgs[i] = relaytest.NewMsg("torture", key, 0)
			msgs[i].Payload = string(b)
		}
		before := fam.count()
		// Committed while no other family restarts the server (the
		// relay decodes it only once committed, so nothing is lost by
		// waiting); the read lock is let go before the fault, which may
		// be a restart.
		cl.mu.RLock()
		err := func() error {
			c, err := pgx.Connect(ctx, url)
			if err != nil {
				return err
			}
			defer c.Close(ctx)
			return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error { return ob.Insert(ctx, tx, msgs...) })
		}()
		cl.mu.RUnlock()
		if err != nil {
			fault()
			return fmt.Sprintf("the big transaction failed (%v)", err)
		}
		want := before + s.bigRows/5
		deadline := time.Now().Add(30 * time.Second)
		for fam.count() < want && time.Now().Before(deadline) {
			rs.supervise()
			time.Sleep(2 * time.Millisecond)
		}
		at := fam.count() - before
		fault()
		return fmt.Sprintf("sinks held %d more messages (big transaction %d rows)", at, s.bigRows)
	}
	// heldTx commits a held-key sequence of three rows whose second the
	// sinks refuse (too large, or to a destination that does not exist).
	heldTx := func(kind string) {
		heldKeys++
		key := fmt.Sprintf("held%d", heldKeys)
		var msgs []relaytest.Msg
		for i := 1; i <= 3; i++ {
			m := relaytest.NewMsg("held", key, 0)
			b, _ := json.Marshal(relaytest.Seq{Key: key, Seq: i})
			m.Payload = string(b)
			if i == 2 {
				if kind == faultTooLarge {
					m.Payload = fmt.Sprintf(`{"key": %q, "seq": 2, "pad": %q}`, key, strings.Repeat("x", fam.tooBig))
				} else {
					m.Type = "missing"
				}
			}
			msgs = append(msgs, m)
			held = append(held, heldSeq{m.ID, key, i, i == 2})
		}
		// Not while another family restarts the server: the rows must
		// commit, and their outcome be known.
		cl.mu.RLock()
		defer cl.mu.RUnlock()
		ob.InsertTx(t, db(), msgs...)
	}
	// moreHeld commits one more row of every held key: it must be parked
	// behind the refused one, across the faults that follow.
	moreHeld := func() {
		if heldKeys == 0 {
			return
		}
		var msgs []relaytest.Msg
		for k := 1; k <= heldKeys; k++ {
			key := fmt.Sprintf("held%d", k)
			seq := 0
			for _, h := range held {
				if h.key == key {
					seq = max(seq, h.seq)
				}
			}
			m := relaytest.NewMsg("held", key, 0)
			b, _ := json.Marshal(relaytest.Seq{Key: key, Seq: seq + 1})
			m.Payload = string(b)
			msgs = append(msgs, m)
			held = append(held, heldSeq{m.ID, key, seq + 1, false})
		}
		cl.mu.RLock()
		defer cl.mu.RUnlock()
		ob.InsertTx(t, db(), msgs...)
	}

	inject := func(kind string) string {
		a := rs.active()
		switch kind {
		case faultKill9:
			rs.kill9(a, true)
		case faultKill9MidTx:
			return bigTx(func() {
				rs.kill9(rs.active(), true)
			})
		case faultSIGTERM:
			// Not while another family restarts the server: a relay
			// that cannot reach it while it drains exits 1.
			cl.mu.RLock()
			defer cl.mu.RUnlock()
			a.p.Cmd.Process.Signal(syscall.SIGTERM)
			// 0, or 3 when relay.shutdown_timeout cut the drain (nothing
			// lost: docs/operations.md), which a busy machine can take.
			switch code := a.p.Wait(60 * time.Second); code {
			case 0:
			case 3:
				drainsCut++
			case 1:
				// The relay's exit when its dead-letter connection broke
				// at an earlier restart (README, Known limits): counted
				// with the other exits; anything else is a failure.
				if last := lastLine(a.p.Stderr.String()); strings.Contains(last, "dead-letter: ") {
					rs.exits = append(rs.exits, last)
					break
				}
				t.Errorf("%s: SIGTERM: exit 1, want 0 (or 3: the drain cut)\n%s", name, a.p.Logs())
			default:
				t.Errorf("%s: SIGTERM: exit %d, want 0 (or 3: the drain cut)\n%s", name, code, a.p.Logs())
			}
			rs.gone(a)
			rs.start()
		case faultWALSender:
			return bigTx(func() {
				db().Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1", ob.Slot)
			})
		case faultSIGSTOP:
			return bigTx(func() {
				a := rs.active()
				a.p.Cmd.Process.Signal(syscall.SIGSTOP)
				defer a.p.Cmd.Process.Signal(syscall.SIGCONT)
				var pid *int32
				db().QueryRow(ctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", ob.Slot).Scan(&pid)
				// Past wal_sender_timeout: the server ends the WAL sender.
				ended := func() bool {
					var now *int32
					if err := db().QueryRow(ctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", ob.Slot).Scan(&now); err != nil {
						return false
					}
					return now == nil || pid == nil || *now != *pid
				}
				if pid != nil && !awaitStoppedRelaysWALSenderGone(t, name+": ", db(), *pid, 20*time.Second, ended) {
					t.Errorf("%s: the WAL sender of the stopped relay did not end (wal_sender_timeout 2s), even terminated", name)
				}
			})
		case faultPGImmediate:
			return bigTx(func() { cl.restart(t, "immediate") })
		case faultPGFast:
			cl.restart(t, "fast")
		case faultOutage:
			restore := fam.outage()
			d := time.Duration(1000+rng.IntN(1500)) * time.Millisecond
			time.Sleep(d)
			restore()
			return d.String()
		case faultCut:
			fam.outage()()
		case faultStandby:
			// Either may hold the slot once a restart of the server
			// (another family's fault) made them race for it.
			rs.start()
			var streaming *faultRelay
			if !pgtest.WaitFor(30*time.Second, func() bool {
				rs.supervise() // one may exit while the server restarts
				var waiting *faultRelay
				streaming = nil
				for _, r := range rs.relays {
					if readyz(r.listen) == http.StatusOK {
						streaming = r
					} else if strings.Contains(r.p.Stderr.String(), "held by another process") {
						waiting = r
					}
				}
				return streaming != nil && waiting != nil
			}) {
				t.Fatalf("%s: no second instance waited for the slot while one streamed\n%s", name, rs.allLogs())
			}
			rs.kill9(streaming, false)
		case faultTooLarge, faultNoDest:
			heldTx(kind)
		}
		return ""
	}

	var plan []string
	if s.duration == 0 {
		plan = slices.Clone(kinds)
		rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	}
	start := time.Now()
	for i := 0; ; i++ {
		var kind string
		if s.duration == 0 {
			if i == len(plan) {
				break
			}
			kind = plan[i]
		} else {
			if time.Since(start) > s.duration {
				break
			}
			kind = kinds[rng.IntN(len(kinds))]
		}
		time.Sleep(time.Duration(50+rng.IntN(250)) * time.Millisecond)
		if rng.IntN(3) == 0 {
			moreHeld()
		}
		sentAtSample()
		note := inject(kind)
		events = append(events, faultEvent{kind, note})
		t.Logf("%s: fault %d %s %s", name, i+1, kind, note)
	}
	moreHeld()
	prod.Stop()
	stopRollbacks()

	// Everything committed reaches every sink (the held keys' rows from
	// the refused one on: its dead-letter table).
	var committed map[string]relaytest.Seq
	cl.mu.RLock()
	committed = prod.Committed(t, db())
	cl.mu.RUnlock()
	parked := func() map[string]map[string]bool { // sink -> ids
		out := map[string]map[string]bool{}
		cl.mu.RLock()
		defer cl.mu.RUnlock()
		rows, err := db().Query(ctx, "SELECT sink, message_id FROM "+dlq)
		if err != nil {
			return out
		}
		defer rows.Close()
		for rows.Next() {
			var sink, id string
			rows.Scan(&sink, &id)
			if out[sink] == nil {
				out[sink] = map[string]bool{}
			}
			out[sink][id] = true
		}
		return out
	}
	complete := func(sink string, lines []relaytest.Line, parked map[string]bool) bool {
		if !relaytest.AllDelivered(committed, lines) {
			return false
		}
		has := map[string]bool{}
		for _, l := range lines {
			has[l.ID] = true
		}
		for _, h := range held {
			if !has[h.id] && !parked[h.id] {
				return false
			}
		}
		return true
	}
	// Until everything is there, or 120 s without progress (a slow sink
	// may have a long backlog after a long run).
	final := map[string][]relaytest.Line{}
	seen, progress := -1, time.Now()
	for {
		rs.supervise()
		p := parked()
		done, n := true, 0
		for sink, read := range fam.read {
			final[sink] = read(t)
			n += len(final[sink]) + len(p[sink])
			done = done && complete(sink, final[sink], p[sink])
		}
		if done {
			break
		}
		if n != seen {
			seen, progress = n, time.Now()
		}
		if time.Since(progress) > 120*time.Second {
			t.Logf("%s: not everything delivered, and nothing more for 120 s; relays:\n%s", name, rs.allLogs())
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	p := parked()
	var report []string
	for sink := range fam.read {
		lines := final[sink]
		r := relaytest.CheckDelivered(t, name+"/"+sink, committed, lines) // lost, uncommitted, per-key order
		if fam.exactlyOnce[sink] && r.Duplicates > 0 {
			t.Errorf("%s: exactly_once sink %s: a read_committed consumer saw %d duplicates (faults %v)", name, sink, r.Duplicates, events)
		}
		checkHeldKeys(t, name+"/"+sink, held, lines, p[sink], fam.tooBig > 0 || fam.noDest)
		report = append(report, fmt.Sprintf("%s: %d committed, %d duplicates, %d parked", sink, r.Committed, r.Duplicates, len(p[sink])))
	}
	sentAtSample()
	if s.sentAt && sentAtSeen == 0 {
		// Marks follow the acks (every 100 ms, later after a restart): a
		// run of one early fault (WALPOST_FAULT_KINDS=pg-fast) may sample
		// before any, and end as soon as the sinks hold everything.
		pgtest.WaitFor(15*time.Second, func() bool { sentAtSample(); return sentAtSeen > 0 })
	}
	if s.sentAt && sentAtSeen == 0 {
		t.Errorf("%s: no row was ever seen with sent_at set: the sent_at check proved nothing", name)
	}
	var kindsRun []string
	for _, e := range events {
		kindsRun = append(kindsRun, e.kind)
	}
	tries, failed := prod.Attempts()
	if drainsCut > 0 {
		t.Logf("%s: %d SIGTERMs ended in exit 3: relay.shutdown_timeout (10s) cut the drain", name, drainsCut)
	}
	if len(rs.exits) > 0 {
		t.Logf("%s: %d relays exited by themselves and were started again (as a supervisor would): %s", name, len(rs.exits), strings.Join(rs.exits, " | "))
	}
	t.Logf("%s: seed %d; %d faults (%s); %d transactions tried (%d failed), %d big, %d held keys; %s; sent_at samples: up to %d rows marked, %d bad",
		name, s.seed, len(events), strings.Join(kindsRun, ", "), tries, failed, bigTxs, heldKeys, strings.Join(report, "; "), sentAtSeen, sentAtBad)
	if t.Failed() {
		t.Logf("%s: relays:\n%s", name, rs.allLogs())
	}
}

// checkHeldKeys checks hold_key for one sink: of each held key, the rows
// before the refused one are delivered, the refused one and every later
// row are parked and none of them is delivered (refuses: the sink refuses
// the refused rows; else every row is delivered).
func checkHeldKeys(t *testing.T, sink string, held []heldSeq, lines []relaytest.Line, parked map[string]bool, refuses bool) {
	t.Helper()
	delivered := map[string]bool{}
	for _, l := range lines {
		delivered[l.ID] = true
	}
	refusedAt := map[string]int{}
	for _, h := range held {
		if h.refused {
			refusedAt[h.key] = h.seq
		}
	}
	keys := map[string][]heldSeq{}
	for _, h := range held {
		keys[h.key] = append(keys[h.key], h)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range keys {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range names {
		hs := keys[k]
		sort.Slice(hs, func(i, j int) bool { return hs[i].seq < hs[j].seq })
		for _, h := range hs {
			switch {
			case !refuses || h.seq < refusedAt[k]:
				if !delivered[h.id] {
					t.Errorf("%s: key %s seq %d (%s) not delivered", sink, k, h.seq, h.id)
				}
			case delivered[h.id]:
				t.Errorf("%s: key %s seq %d (%s) delivered ahead of the parked head of its key (seq %d): hold_key broken", sink, k, h.seq, h.id, refusedAt[k])
			case !parked[h.id]:
				t.Errorf("%s: key %s seq %d (%s) neither delivered nor parked: lost", sink, k, h.seq, h.id)
			}
		}
	}
}

// rollBackNow rolls back a transaction of "torture" rows every 50 ms (and
// one of 2,000 rows first) until the returned function is called: none of
// them may reach a sink (CheckDelivered: "never committed").
func rollBackNow(t *testing.T, ob relaytest.Outbox) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		ctx := context.Background()
		n := 2000
		for {
			select {
			case <-quit:
				return
			case <-time.After(50 * time.Millisecond):
			}
			c, err := pgx.Connect(ctx, ob.URL)
			if err != nil {
				continue
			}
			msgs := make([]relaytest.Msg, n)
			for i := range msgs {
				msgs[i] = relaytest.NewMsg("torture", "rolledback", i)
			}
			if tx, err := c.Begin(ctx); err == nil {
				ob.Insert(ctx, tx, msgs...)
				tx.Rollback(ctx)
			}
			c.Close(ctx)
			n = 1 + rand.IntN(5)
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit); <-done }) }
}

func recordHeader(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
