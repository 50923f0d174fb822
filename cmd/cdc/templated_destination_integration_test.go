package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walpost/walpost/internal/ops"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
	"github.com/walpost/walpost/internal/publish/natsjs"
	"github.com/walpost/walpost/internal/publish/natsjs/natstest"
	"github.com/walpost/walpost/internal/publish/rabbitmq/rabbittest"
	"github.com/walpost/walpost/internal/publish/servicebus/sbfake"
	"github.com/walpost/walpost/internal/relaytest"
)

// The destination types of the templated-destination tests: every sink's
// destination is a template on the message type, and the broker has the
// destination of typeOK but not that of typeMissing until the test
// creates it.
const (
	typeOK      = "ok"
	typeMissing = "missing"
)

// arrival is one message a broker holds: the type its destination came
// from and its id.
type arrival struct{ typ, id string }

// templatedBroker is one sink kind's side of the templated-destination
// tests.
type templatedBroker struct {
	// sink is the sink's YAML mapping, named s, whose destination is a
	// template on {type}.
	sink string
	// missing is the destination typeMissing expands to: the refusal
	// must name it.
	missing string
	// says is what else the refusal must say.
	says []string
	// create makes the missing destination; from then on messages of
	// typeMissing are delivered.
	create func(t *testing.T)
	// received returns what the broker holds: each message once (the
	// first copy), each destination's in its order; with oneLog, in the
	// order of one log that every destination feeds (a NATS stream, a
	// RabbitMQ queue), else destination after destination.
	received func(t *testing.T) []arrival
	oneLog   bool
	// perKeyOrder: a destination keeps order per key only (Pub/Sub's
	// ordering keys), so the checks that span keys compare what arrived,
	// not its order.
	perKeyOrder bool
}

// sameIDs reports whether a destination's ids are want: in order, or
// with b.perKeyOrder in any order.
func (b *templatedBroker) sameIDs(ids, want []string) bool {
	if b.perKeyOrder {
		ids, want = slices.Sorted(slices.Values(ids)), slices.Sorted(slices.Values(want))
	}
	return slices.Equal(ids, want)
}

// templatedBrokers are the sinks whose destination can be a template on
// the message type, each on a broker of the test's own (a stream, an
// exchange and a queue, a kfake cluster, a Service Bus stand-in),
// removed when the test ends. Each skips the test when its broker is not
// there.
var templatedBrokers = []struct {
	kind  string
	start func(t *testing.T) *templatedBroker
}{
	{"nats", natsTemplated},
	{"rabbitmq", rabbitTemplated},
	{"kafka", kafkaTemplated},
	{"servicebus", serviceBusTemplated},
	{"sqs", sqsTemplated},
	{"sns", snsTemplated},
	{"pubsub", pubsubTemplated},
}

// natsTemplated: subject "<prefix>.{type}", one stream on "<prefix>.ok";
// create adds "<prefix>.missing" to the stream's subjects.
func natsTemplated(t *testing.T) *templatedBroker {
	u := natstest.Start(t) // skips without a NATS server
	prefix := natstest.Unique(t)
	cfg := jetstream.StreamConfig{Name: prefix, Subjects: []string{prefix + "." + typeOK}, Storage: jetstream.MemoryStorage}
	natstest.CreateStream(t, u, cfg)
	return &templatedBroker{
		sink:    fmt.Sprintf("{name: s, kind: nats, servers: [%q], subject: %q, ack_timeout: 2s}", u, prefix+".{type}"),
		missing: prefix + "." + typeMissing,
		says:    []string{"no stream covers", "cdc dead-letter resend"},
		oneLog:  true,
		create: func(t *testing.T) {
			cfg.Subjects = append(cfg.Subjects, prefix+"."+typeMissing)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := natstest.JetStream(t, u).UpdateStream(ctx, cfg); err != nil {
				t.Fatalf("adding %s.%s to stream %s: %v", prefix, typeMissing, prefix, err)
			}
		},
		received: func(t *testing.T) []arrival {
			var out []arrival
			for _, m := range natstest.Read(t, u, prefix) {
				out = append(out, arrival{strings.TrimPrefix(m.Subject, prefix+"."), m.Header.Get(natsjs.HeaderMsgID)})
			}
			return firstCopies(out)
		},
	}
}

// rabbitTemplated: exchange "<base>.{type}", exchange "<base>.ok" bound to
// the test's queue; create declares "<base>.missing" and binds the same
// queue to it.
func rabbitTemplated(t *testing.T) *templatedBroker {
	u := rabbittest.Start(t) // skips without RabbitMQ
	base := rabbittest.Name("walpost.test.tmpl")
	top := rabbittest.Declare(t, u, rabbittest.Topology{Exchange: base + "." + typeOK})
	missing := base + "." + typeMissing
	var mu sync.Mutex
	var got []arrival
	return &templatedBroker{
		sink:    fmt.Sprintf("{name: s, kind: rabbitmq, url: %q, exchange: %q, timeout: 2s}", u, base+".{type}"),
		missing: missing,
		says:    []string{"does not exist"},
		oneLog:  true,
		create: func(t *testing.T) {
			t.Cleanup(func() { rabbittest.DeleteExchange(t, u, missing) })
			rabbittest.With(t, u, func(ch *amqp.Channel) error {
				if err := ch.ExchangeDeclare(missing, amqp.ExchangeTopic, true, true, false, false, nil); err != nil {
					return err
				}
				return ch.QueueBind(top.Queue, "#", missing, false, nil)
			})
		},
		received: func(t *testing.T) []arrival {
			mu.Lock()
			defer mu.Unlock()
			for _, d := range rabbittest.Drain(t, u, top.Queue) {
				got = append(got, arrival{strings.TrimPrefix(d.Exchange, base+"."), d.MessageId})
			}
			return firstCopies(got)
		},
	}
}

// kafkaTemplated: topic "{type}" on a kfake cluster with topic "ok";
// create creates topic "missing".
func kafkaTemplated(t *testing.T) *templatedBroker {
	kc := kafkatest.Start(t, kfake.SeedTopics(1, typeOK))
	return &templatedBroker{
		sink:    fmt.Sprintf("{name: s, kind: kafka, brokers: [%s], topic: %q, timeout: 2s}", strings.Join(kc.Addrs(), ", "), "{type}"),
		missing: typeMissing,
		says:    []string{"does not exist"},
		create: func(t *testing.T) {
			cl, err := kgo.NewClient(kgo.SeedBrokers(kc.Addrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			req := kmsg.NewPtrCreateTopicsRequest()
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = typeMissing, 1, 1
			req.Topics = append(req.Topics, rt)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := req.RequestWith(ctx, cl)
			if err == nil && resp.Topics[0].ErrorCode != 0 {
				err = fmt.Errorf("error code %d", resp.Topics[0].ErrorCode)
			}
			if err != nil {
				t.Fatalf("creating topic %s: %v", typeMissing, err)
			}
		},
		received: func(t *testing.T) []arrival {
			var out []arrival
			for _, topic := range []string{typeOK, typeMissing} {
				if kc.PartitionInfos(topic) == nil {
					continue // not created yet
				}
				for _, r := range kc.ReadAll(t, topic) {
					out = append(out, arrival{topic, recordHeader(r, "id")})
				}
			}
			return firstCopies(out)
		},
	}
}

// serviceBusTemplated: entity "{type}" on the Service Bus stand-in with
// queue "ok"; create creates queue "missing".
func serviceBusTemplated(t *testing.T) *templatedBroker {
	sb := sbfake.Start(t) // skips without node
	sb.CreateQueue(t, typeOK, sbfake.QueueOptions{})
	c, err := azservicebus.NewClientFromConnectionString(sb.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	var mu sync.Mutex
	queues := []string{typeOK}
	got := map[string][]string{}
	return &templatedBroker{
		sink:    fmt.Sprintf("{name: s, kind: servicebus, connection_string: %q, entity: %q, timeout: 5s}", sb.ConnectionString(), "{type}"),
		missing: typeMissing,
		says:    []string{"does not exist"},
		create: func(t *testing.T) {
			sb.CreateQueue(t, typeMissing, sbfake.QueueOptions{})
			mu.Lock()
			queues = append(queues, typeMissing)
			mu.Unlock()
		},
		received: func(t *testing.T) []arrival {
			mu.Lock()
			defer mu.Unlock()
			var out []arrival
			for _, q := range queues {
				r, err := c.NewReceiverForQueue(q, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				msgs, _ := r.ReceiveMessages(ctx, 100, nil)
				cancel()
				r.Close(context.Background())
				for _, m := range msgs {
					got[q] = append(got[q], m.MessageID)
				}
				for _, id := range got[q] {
					out = append(out, arrival{q, id})
				}
			}
			return firstCopies(out)
		},
	}
}

// firstCopies drops the later copies of a message (delivery is at least
// once: a resent batch may be stored twice).
func firstCopies(in []arrival) []arrival {
	seen := map[string]bool{}
	var out []arrival
	for _, a := range in {
		if !seen[a.id] {
			seen[a.id] = true
			out = append(out, a)
		}
	}
	return out
}

// idsTo returns the ids that arrived at the destination of typ, in order.
func idsTo(got []arrival, typ string) []string {
	var out []string
	for _, a := range got {
		if a.typ == typ {
			out = append(out, a.id)
		}
	}
	return out
}

// hasAll reports whether every id in want arrived at the destination of
// typ.
func hasAll(got []arrival, typ string, want ...relaytest.Msg) bool {
	ids := idsTo(got, typ)
	for _, m := range want {
		if !slices.Contains(ids, m.ID) {
			return false
		}
	}
	return true
}

// msgIDs returns the messages' ids.
func msgIDs(msgs ...relaytest.Msg) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

// templatedSetup writes the config of an outbox of the test's own with
// the broker's sink, its dead-letter table and relay settings extra, and
// runs cdc init.
func templatedSetup(t *testing.T, b *templatedBroker, relay string) (relaytest.Outbox, string) {
	t.Helper()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	cfg := ob.Config(t, "  - "+b.sink, "relay: {batch_size: 10, retry_backoff: 200ms, shutdown_timeout: 2s, refused_attempts: 1, "+relay+"}")
	relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	return ob, cfg
}

// checkRefusal fails the test unless the parked row's error names the
// missing destination and says what the broker's refusal says.
func checkRefusal(t *testing.T, b *templatedBroker, what, text string) {
	t.Helper()
	for _, want := range append([]string{b.missing}, b.says...) {
		if !strings.Contains(text, want) {
			t.Errorf("%s does not say %q: %s", what, want, text)
		}
	}
}

// TestIntegrationTemplatedDestinationMissingIsParked: for every sink with
// a destination template, a row whose destination the broker does not
// have is a refusal of that row: under relay.on_refused: dead_letter it
// is parked for the sink with an error naming the destination, the relay
// keeps running and delivers the rows after it, of its key too. cdc
// dead-letter resend of it fails, saying why, until the destination
// exists, and then delivers it; the running relay delivers the next row
// of that type.
func TestIntegrationTemplatedDestinationMissingIsParked(t *testing.T) {
	t.Parallel()
	for _, tb := range templatedBrokers {
		t.Run(tb.kind, func(t *testing.T) {
			t.Parallel()
			b := tb.start(t)
			ob, cfg := templatedSetup(t, b, "on_refused: dead_letter")
			conn := pgtest.Connect(t, ob.URL)
			first := relaytest.NewMsg(typeOK, "k1", 1)
			refused := relaytest.NewMsg(typeMissing, "k2", 2)
			sameKey := relaytest.NewMsg(typeOK, "k2", 3)
			otherKey := relaytest.NewMsg(typeOK, "k1", 4)
			ob.InsertTx(t, conn, first, refused, sameKey, otherKey)

			p := startCDC(t, "run", "--config", cfg)
			var got []arrival
			if !pgtest.WaitFor(60*time.Second, func() bool {
				got = b.received(t)
				return p.Exited() || hasAll(got, typeOK, first, sameKey, otherKey)
			}) || p.Exited() {
				t.Fatalf("the rows after the refused one did not arrive (relay exited: %v)\n%s", p.Exited(), p.Stderr.String())
			}
			if ids, want := idsTo(got, typeOK), msgIDs(first, sameKey, otherKey); !b.sameIDs(ids, want) {
				t.Errorf("destination %s holds %v, want %v", typeOK, ids, want)
			}
			// A sink that publishes per destination (Service Bus) may
			// deliver the other rows before it learns of the refusal.
			var parked []parkedRow
			pgtest.WaitFor(30*time.Second, func() bool { parked = listParked(t, cfg); return len(parked) > 0 })
			if len(parked) != 1 || parked[0].ID == nil || *parked[0].ID != refused.ID || parked[0].Sink != "s" {
				t.Fatalf("parked %+v, want %s alone, for sink s", parked, refused.ID)
			}
			checkRefusal(t, b, "the parked row's error", parked[0].Error)

			code, stdout, stderr := cdc(t, nil, "dead-letter", "--config", cfg, "resend", refused.ID)
			if code != 1 || !strings.Contains(stdout, "failed  "+refused.ID) {
				t.Fatalf("resend while %s does not exist: exit %d, want 1 and the row failed\n%s%s", b.missing, code, stdout, stderr)
			}
			checkRefusal(t, b, "the failed resend", stdout)

			b.create(t)
			code, stdout, stderr = cdc(t, nil, "dead-letter", "--config", cfg, "resend", refused.ID)
			if code != 0 || !strings.HasPrefix(stdout, "resent  "+refused.ID) {
				t.Fatalf("resend once %s exists: exit %d, want 0 and the row resent\n%s%s", b.missing, code, stdout, stderr)
			}
			next := relaytest.NewMsg(typeMissing, "k3", 5)
			ob.InsertTx(t, conn, next)
			if !pgtest.WaitFor(60*time.Second, func() bool {
				got = b.received(t)
				return p.Exited() || hasAll(got, typeMissing, refused, next)
			}) || p.Exited() {
				t.Fatalf("destination %s holds %v, want %s (resent) and %s (relayed; relay exited: %v)\n%s",
					b.missing, idsTo(got, typeMissing), refused.ID, next.ID, p.Exited(), p.Stderr.String())
			}
			p.Stop(t)
			if ids, want := idsTo(got, typeMissing), msgIDs(refused, next); !b.sameIDs(ids, want) {
				t.Errorf("destination %s holds %v, want %v", b.missing, ids, want)
			}
		})
	}
}

// TestIntegrationTemplatedDestinationMissingHoldsItsKey: for every sink
// with a destination template, a row whose destination the broker does
// not have holds its key under relay.on_refused: hold_key: the key's
// later rows are parked behind it, whichever destination they go to,
// while another key's rows are delivered. cdc dead-letter resend of it
// fails and releases nothing until the destination exists; then it
// releases the key: its rows arrive in WAL order, and the key's next row
// is relayed after them.
func TestIntegrationTemplatedDestinationMissingHoldsItsKey(t *testing.T) {
	t.Parallel()
	for _, tb := range templatedBrokers {
		t.Run(tb.kind, func(t *testing.T) {
			t.Parallel()
			b := tb.start(t)
			ob, cfg := templatedSetup(t, b, "on_refused: hold_key")
			conn := pgtest.Connect(t, ob.URL)
			head := relaytest.NewMsg(typeMissing, "held", 1)
			other1 := relaytest.NewMsg(typeOK, "free", 2)
			heldOK := relaytest.NewMsg(typeOK, "held", 3) // deliverable, but behind the head
			heldMissing := relaytest.NewMsg(typeMissing, "held", 4)
			other2 := relaytest.NewMsg(typeOK, "free", 5)
			ob.InsertTx(t, conn, head, other1)

			p := startCDC(t, "run", "--config", cfg)
			// The key's later rows come once its head is held (that a
			// row of the key read with the head is not stored ahead of
			// it is TestIntegrationHoldKeyNothingOvertakesItsParkedHeadAcrossDestinations).
			if !pgtest.WaitFor(60*time.Second, func() bool { h := statusHeld(t, cfg); return p.Exited() || len(h) == 1 }) || p.Exited() {
				t.Fatalf("the key was not held (relay exited: %v)\n%s", p.Exited(), p.Stderr.String())
			}
			ob.InsertTx(t, conn, heldOK, heldMissing, other2)
			var got []arrival
			var held []ops.HeldKey
			if !pgtest.WaitFor(60*time.Second, func() bool {
				got = b.received(t)
				if p.Exited() || !hasAll(got, typeOK, other1, other2) {
					return p.Exited()
				}
				held = statusHeld(t, cfg)
				return len(held) == 1 && held[0].Messages == 3
			}) || p.Exited() {
				t.Fatalf("the other key's rows did not arrive or the key is not held with 3 messages (held %+v, relay exited: %v)\n%s",
					held, p.Exited(), p.Stderr.String())
			}
			if ids, want := idsTo(got, typeOK), msgIDs(other1, other2); !slices.Equal(ids, want) {
				t.Fatalf("destination %s holds %v, want only the other key's %v", typeOK, ids, want)
			}
			if held[0].Sink != "s" || held[0].Key != "held" || held[0].HeadID != head.ID {
				t.Fatalf("cdc status held_keys %+v, want key held for sink s behind %s", held, head.ID)
			}
			parked := listParked(t, cfg)
			if ids, want := parkedIDs(parked), msgIDs(head, heldOK, heldMissing); !slices.Equal(ids, want) {
				t.Fatalf("parked %v, want the head and the two rows behind it %v", ids, want)
			}
			checkRefusal(t, b, "the head's error", parked[0].Error)

			code, stdout, stderr := cdc(t, nil, "dead-letter", "--config", cfg, "resend", head.ID)
			if code != 1 || !strings.Contains(stdout, "failed  "+head.ID) || strings.Contains(stdout, "resent  ") {
				t.Fatalf("resend while %s does not exist: exit %d, want 1, the head failed and nothing resent\n%s%s", b.missing, code, stdout, stderr)
			}
			checkRefusal(t, b, "the failed resend", stdout)
			if got = b.received(t); len(got) != 2 {
				t.Fatalf("after the failed resend the broker holds %v, want only the other key's 2", got)
			}

			b.create(t)
			code, stdout, stderr = cdc(t, nil, "dead-letter", "--config", cfg, "resend", head.ID)
			if code != 0 || strings.Count(stdout, "resent  ") != 3 || !strings.HasPrefix(stdout, "resent  "+head.ID) {
				t.Fatalf("resend once %s exists: exit %d, want 0 and the head and its 2 held rows resent\n%s%s", b.missing, code, stdout, stderr)
			}
			next := relaytest.NewMsg(typeOK, "held", 6)
			ob.InsertTx(t, conn, next)
			if !pgtest.WaitFor(60*time.Second, func() bool {
				got = b.received(t)
				return p.Exited() || (hasAll(got, typeMissing, head, heldMissing) && hasAll(got, typeOK, heldOK, next))
			}) || p.Exited() {
				t.Fatalf("after the release the broker holds %v, want every row of the key (relay exited: %v)\n%s", got, p.Exited(), p.Stderr.String())
			}
			if held = statusHeld(t, cfg); len(held) != 0 {
				t.Errorf("cdc status held_keys after the release %+v, want none", held)
			}
			p.Stop(t)
			if ids, want := idsTo(got, typeMissing), msgIDs(head, heldMissing); !slices.Equal(ids, want) {
				t.Errorf("destination %s holds %v, want %v", b.missing, ids, want)
			}
			if ids, want := idsTo(got, typeOK), msgIDs(other1, other2, heldOK, next); !b.sameIDs(ids, want) {
				t.Errorf("destination %s holds %v, want %v", typeOK, ids, want)
			}
			if b.oneLog {
				var key []string
				for _, a := range got {
					if a.id != other1.ID && a.id != other2.ID {
						key = append(key, a.id)
					}
				}
				if want := msgIDs(head, heldOK, heldMissing, next); !slices.Equal(key, want) {
					t.Errorf("the held key's rows arrived as %v, want WAL order %v", key, want)
				}
			}
		})
	}
}
