package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	sqsapi "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/natsjs"
	"github.com/walpost/walpost/internal/publish/natsjs/natstest"
	"github.com/walpost/walpost/internal/publish/rabbitmq/rabbittest"
	"github.com/walpost/walpost/internal/publish/servicebus/sbfake"
	"github.com/walpost/walpost/internal/publish/sqs"
	"github.com/walpost/walpost/internal/publish/sqs/sqsfake"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/outbox"
)

// scheduleColumns is the columns: mapping of scheduledOutbox's table.
const scheduleColumns = "columns: {deliver_at: deliver_at, expires_at: expires_at}"

// scheduledOutbox is an outbox of the default layout with the optional
// deliver_at and expires_at columns added, as docs/configuration.md says.
func scheduledOutbox(t *testing.T, url string) relaytest.Outbox {
	t.Helper()
	ob := relaytest.NewOutbox(t, url)
	pgtest.Exec(t, url, "ALTER TABLE "+ob.Table+" ADD COLUMN deliver_at timestamptz NULL, ADD COLUMN expires_at timestamptz NULL")
	return ob
}

// scheduledMsg is a row of scheduledOutbox; zero times are NULL.
type scheduledMsg struct {
	relaytest.Msg
	DeliverAt, ExpiresAt time.Time
}

// insertScheduled writes msgs in one transaction with outbox.Writer, the
// writer library's DeliverAt and ExpiresAt mapped to the columns.
func insertScheduled(t *testing.T, ob relaytest.Outbox, msgs ...scheduledMsg) {
	t.Helper()
	ctx := context.Background()
	conn := pgtest.Connect(t, ob.URL)
	w := outbox.Writer{Table: ob.Table, Columns: outbox.Columns{DeliverAt: "deliver_at", ExpiresAt: "expires_at"}}
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, m := range msgs {
			if err := w.Enqueue(ctx, tx, outbox.Message{ID: m.ID, Type: m.Type, Key: m.Key, Payload: json.RawMessage(m.Payload),
				DeliverAt: m.DeliverAt, ExpiresAt: m.ExpiresAt}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationServiceBusScheduledMessageArrivesNoEarlier: a row whose
// deliver_at is 3 s ahead goes to Service Bus (the stand-in) with
// ScheduledEnqueueTime, and a receiver gets it no earlier than that,
// while the row without one, written in the same transaction after it,
// arrives first; its expires_at becomes the TimeToLive counted from the
// scheduled time.
func TestIntegrationServiceBusScheduledMessageArrivesNoEarlier(t *testing.T) {
	t.Parallel()
	sb := sbfake.Start(t) // skips without node
	sb.CreateQueue(t, "sched", sbfake.QueueOptions{})
	url := pgtest.URL(t)
	ob := scheduledOutbox(t, url)
	sinkYAML := fmt.Sprintf("  - {name: sb, kind: servicebus, connection_string: %q, entity: sched, timeout: 5s}", sb.ConnectionString())
	cfg := ob.Config(t, sinkYAML, scheduleColumns)
	cdcInit(t, cfg)

	deliverAt := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	expiresAt := deliverAt.Add(time.Hour)
	later := scheduledMsg{Msg: relaytest.NewMsg("t", "k", 1), DeliverAt: deliverAt, ExpiresAt: expiresAt}
	now := scheduledMsg{Msg: relaytest.NewMsg("t", "k", 2)}
	insertScheduled(t, ob, later, now)
	p := startCDC(t, "run", "--config", cfg)
	defer p.Stop(t)

	c, err := azservicebus.NewClientFromConnectionString(sb.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	r, err := c.NewReceiverForQueue("sched", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	got := map[string]*azservicebus.ReceivedMessage{}
	var order []string
	if !pgtest.WaitFor(60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		msgs, _ := r.ReceiveMessages(ctx, 10, nil)
		cancel()
		for _, m := range msgs {
			if m.MessageID == later.ID && time.Now().Before(deliverAt) {
				t.Fatalf("the scheduled message arrived at %s, before its deliver_at %s", time.Now().Format(time.RFC3339Nano), deliverAt.Format(time.RFC3339Nano))
			}
			got[m.MessageID] = m
			order = append(order, m.MessageID)
		}
		return len(got) == 2 || p.Exited()
	}) || p.Exited() {
		t.Fatalf("got %v of 2 messages (relay exited: %v)\n%s", order, p.Exited(), p.Stderr.String())
	}
	if order[0] != now.ID {
		t.Fatalf("order %v: the unscheduled message did not arrive first", order)
	}
	m := got[later.ID]
	if m.ScheduledEnqueueTime == nil || !m.ScheduledEnqueueTime.Equal(deliverAt) {
		t.Errorf("ScheduledEnqueueTime %v, want %s", m.ScheduledEnqueueTime, deliverAt)
	}
	if m.TimeToLive == nil || *m.TimeToLive <= 59*time.Minute || *m.TimeToLive > time.Hour {
		t.Errorf("TimeToLive %v, want about 1h (expires_at minus deliver_at)", m.TimeToLive)
	}
	if u := got[now.ID]; u.ScheduledEnqueueTime != nil || u.TimeToLive != nil && *u.TimeToLive != 0 {
		t.Errorf("the row without deliver_at and expires_at went with ScheduledEnqueueTime %v, TimeToLive %v", u.ScheduledEnqueueTime, u.TimeToLive)
	}
	if s := sb.Stats(t, "sched"); s.Scheduled != 1 {
		t.Errorf("the stand-in counted %d scheduled messages, want 1", s.Scheduled)
	}
}

// TestIntegrationExpiredRowFollowsOnExpired: a row whose expires_at has
// passed when the relay reads it is dropped (the default), parked for
// its sink (dead_letter) or sent without it (send); the row after it is
// delivered in every case.
func TestIntegrationExpiredRowFollowsOnExpired(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	for _, policy := range []string{"", "drop", "dead_letter", "send"} {
		t.Run("policy="+policy, func(t *testing.T) {
			ob := scheduledOutbox(t, url)
			out := filepath.Join(t.TempDir(), "out.jsonl")
			relayYAML := "relay: {batch_size: 10, shutdown_timeout: 2s}"
			if policy != "" {
				relayYAML = "relay: {batch_size: 10, shutdown_timeout: 2s, on_expired: " + policy + "}"
			}
			// A file sink cannot hold a message back: expires_at only.
			cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "columns: {expires_at: expires_at}\n"+relayYAML)
			relaytest.WithDeadLetterTable(t, url, cfg)
			cdcInit(t, cfg)
			expired := scheduledMsg{Msg: relaytest.NewMsg("t", "k", 1), ExpiresAt: time.Now().Add(-time.Minute)}
			fresh := scheduledMsg{Msg: relaytest.NewMsg("t", "k", 2), ExpiresAt: time.Now().Add(time.Hour)}
			never := scheduledMsg{Msg: relaytest.NewMsg("t", "k", 3)}
			insertScheduled(t, ob, expired, fresh, never)
			p := startCDC(t, "run", "--config", cfg)
			if !pgtest.WaitFor(60*time.Second, func() bool { return p.Exited() || strings.Contains(readFile(t, out), never.ID) }) || p.Exited() {
				t.Fatalf("the rows after the expired one did not arrive (exited: %v)\n%s", p.Exited(), p.Stderr.String())
			}
			p.Stop(t)
			lines := readFile(t, out)
			sent := strings.Contains(lines, expired.ID)
			if sent != (policy == "send") {
				t.Fatalf("on_expired %q: expired row in the sink: %v\n%s", policy, sent, lines)
			}
			if !strings.Contains(lines, fresh.ID) {
				t.Fatalf("the row that had not expired is missing:\n%s", lines)
			}
			parked := listParked(t, cfg)
			if policy == "dead_letter" {
				if len(parked) != 1 || parked[0].ID == nil || *parked[0].ID != expired.ID || parked[0].Sink != "out" || !strings.Contains(parked[0].Error, "expired") {
					t.Fatalf("parked %+v, want the expired row for sink out", parked)
				}
			} else if len(parked) != 0 {
				t.Fatalf("on_expired %q parked %+v", policy, parked)
			}
			logs := p.Stderr.String()
			if !strings.Contains(logs, expired.ID) || !strings.Contains(logs, "expired") {
				t.Errorf("the log does not name the expired row %s:\n%s", expired.ID, logs)
			}
		})
	}
}

// readFile returns the file's content, "" when it does not exist yet.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// TestDeliverAtRefusedForSinksThatCannotHoldBack: with columns.deliver_at
// mapped, a sink kind with no scheduled delivery is a configuration error
// (exit 2) that names the sink and the property; nothing connects.
func TestDeliverAtRefusedForSinksThatCannotHoldBack(t *testing.T) {
	t.Parallel()
	for _, sink := range []string{
		"{name: k1, kind: kafka, brokers: [127.0.0.1:1], topic: t}",
		"{name: w1, kind: webhook, url: 'http://127.0.0.1:1/'}",
		"{name: f1, kind: file, path: /tmp/never}",
		"{name: s1, kind: stdout}",
		"{name: n1, kind: sns, topic_arn: 'arn:aws:sns:us-east-1:000000000000:t', region: us-east-1}",
		"{name: p1, kind: pubsub, project: p, topic: t}",
		"{name: r1, kind: rabbitmq, url: 'amqp://guest:guest@127.0.0.1:1/', exchange: x}",
	} {
		name := strings.TrimPrefix(strings.Split(sink, ",")[0], "{name: ")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := filepath.Join(t.TempDir(), "cdc.yaml")
			writeFile(t, cfg, "postgres: {url: 'postgres://u@127.0.0.1:1/db'}\nsinks:\n  - "+sink+"\n"+scheduleColumns+"\n")
			code, _, stderr := cdc(t, nil, "run", "--config", cfg)
			if code != 2 || !strings.Contains(stderr, "columns.deliver_at") || !strings.Contains(stderr, name) {
				t.Fatalf("exit %d, want 2 naming the sink %s and columns.deliver_at:\n%s", code, name, stderr)
			}
			if strings.Contains(name, "r1") && !strings.Contains(stderr, "x-delayed-message") {
				t.Fatalf("the rabbitmq refusal does not say how RabbitMQ can delay:\n%s", stderr)
			}
		})
	}
	// expires_at alone is no refusal: the relay checks it (on_expired).
	cfg := filepath.Join(t.TempDir(), "cdc.yaml")
	writeFile(t, cfg, "postgres: {url: 'postgres://u@127.0.0.1:1/db'}\nsinks:\n  - {name: k1, kind: kafka, brokers: [127.0.0.1:1], topic: t}\ncolumns: {expires_at: expires_at}\nrelay: {on_expired: bogus}\n")
	if code, _, stderr := cdc(t, nil, "run", "--config", cfg); code != 2 || !strings.Contains(stderr, "relay.on_expired") || strings.Contains(stderr, "columns.expires_at") {
		t.Fatalf("exit %d, want 2 about relay.on_expired only:\n%s", code, stderr)
	}
}

// TestIntegrationRabbitMQExpirationAndDelayedExchange: expires_at becomes
// the AMQP expiration (per-message TTL, milliseconds) on the real server;
// with exchange_type: x-delayed-message on a server without the
// delayed-message plugin (RabbitMQ 3.10 here) the relay stops, saying
// the plugin is missing, and sends nothing early.
func TestIntegrationRabbitMQExpirationAndDelayedExchange(t *testing.T) {
	t.Parallel()
	rabbitURL := rabbittest.Start(t) // skips without RabbitMQ
	rabbit := rabbittest.Declare(t, rabbitURL, rabbittest.Topology{})
	url := pgtest.URL(t)

	ob := scheduledOutbox(t, url)
	sinkYAML := fmt.Sprintf("  - {name: r, kind: rabbitmq, url: %q, exchange: %q, timeout: 5s}", rabbitURL, rabbit.Exchange)
	cfg := ob.Config(t, sinkYAML, "columns: {expires_at: expires_at}")
	cdcInit(t, cfg)
	m := scheduledMsg{Msg: relaytest.NewMsg("t", "k", 1), ExpiresAt: time.Now().Add(time.Hour)}
	insertScheduled(t, ob, m)
	p := startCDC(t, "run", "--config", cfg)
	ds := rabbittest.Await(t, rabbitURL, rabbit.Queue, 1, 60*time.Second)
	p.Stop(t)
	if ds[0].MessageId != m.ID || ds[0].Expiration == "" {
		t.Fatalf("got message %s with expiration %q, want %s with one", ds[0].MessageId, ds[0].Expiration, m.ID)
	}
	var ms int64
	if _, err := fmt.Sscan(ds[0].Expiration, &ms); err != nil || ms <= 3500_000 || ms > 3600_000 {
		t.Fatalf("expiration %q, want about 3600000 ms", ds[0].Expiration)
	}

	exchange := rabbittest.Name("walpost.test.delayed")
	t.Cleanup(func() { rabbittest.DeleteExchange(t, rabbitURL, exchange) })
	ob2 := scheduledOutbox(t, url)
	sinkYAML = fmt.Sprintf("  - {name: r, kind: rabbitmq, url: %q, exchange: %q, exchange_type: x-delayed-message, declare_exchange: true, timeout: 5s}", rabbitURL, exchange)
	cfg = ob2.Config(t, sinkYAML, scheduleColumns)
	cdcInit(t, cfg)
	insertScheduled(t, ob2, scheduledMsg{Msg: relaytest.NewMsg("t", "k", 1), DeliverAt: time.Now().Add(time.Hour)})
	p = startCDC(t, "run", "--config", cfg)
	if code := p.Wait(60 * time.Second); code != 1 || !strings.Contains(p.Stderr.String(), "rabbitmq_delayed_message_exchange") {
		t.Fatalf("exit %d, want 1 saying the delayed-message plugin is missing:\n%s", code, p.Stderr.String())
	}
}

// TestIntegrationNATSScheduledMessageArrivesNoEarlier: on a nats-server
// with message schedules (embedded in the test binary: the machine's is
// 2.9), a row whose deliver_at is 3 s ahead is stored as a schedule under
// schedule_subject and published by the server to its subject no
// earlier than that, with its expiry as Nats-TTL; the row without one,
// written after it, is on the subject at once with its own Nats-TTL.
func TestIntegrationNATSScheduledMessageArrivesNoEarlier(t *testing.T) {
	t.Parallel()
	natsURL := natstest.StartEmbedded(t)
	stream := "SCHED"
	url := pgtest.URL(t)
	ob := scheduledOutbox(t, url)
	sinkYAML := fmt.Sprintf("  - {name: n, kind: nats, servers: [%q], subject: 'sched.{type}', schedule_subject: sched.scheduled, stream: {name: %s, create: true}}",
		natsURL, stream)
	cfg := ob.Config(t, sinkYAML, scheduleColumns)
	cdcInit(t, cfg)

	deliverAt := time.Now().Add(3 * time.Second)
	later := scheduledMsg{Msg: relaytest.NewMsg("t", "k", 1), DeliverAt: deliverAt, ExpiresAt: deliverAt.Add(time.Hour)}
	now := scheduledMsg{Msg: relaytest.NewMsg("t", "k", 2), ExpiresAt: time.Now().Add(time.Hour)}
	insertScheduled(t, ob, later, now)
	p := startCDC(t, "run", "--config", cfg)
	defer p.Stop(t)

	onSubject := func() map[string]natstest.Msg {
		got := map[string]natstest.Msg{}
		for _, m := range readStream(t, natsURL, stream) {
			if m.Subject == "sched.t" {
				got[m.Header.Get(natsjs.HeaderMsgID)+m.Header.Get("Nats-Scheduler")] = m
			}
		}
		return got
	}
	scheduled := "sched.scheduled." + later.ID
	if !pgtest.WaitFor(60*time.Second, func() bool { return p.Exited() || len(onSubject()) == 2 }) || p.Exited() {
		t.Fatalf("got %v on sched.t, want 2 messages (relay exited: %v)\n%s", onSubject(), p.Exited(), p.Stderr.String())
	}
	got := onSubject()
	first, ok := got[now.ID]
	if !ok || first.Header.Get(natsjs.HeaderTTL) == "" {
		t.Fatalf("the unscheduled row is not on the subject with a Nats-TTL: %v", got)
	}
	m, ok := got[scheduled]
	if !ok {
		t.Fatalf("no message published by the schedule %s: %v", scheduled, got)
	}
	if m.Time.Before(deliverAt.Truncate(time.Second)) {
		t.Fatalf("the scheduled message was stored at %s, before its deliver_at %s", m.Time.Format(time.RFC3339Nano), deliverAt.Format(time.RFC3339Nano))
	}
	if m.Seq < first.Seq || string(m.Data) != later.Payload {
		t.Fatalf("the scheduled message (seq %d, data %s) is not after the unscheduled one (seq %d) with the row's payload", m.Seq, m.Data, first.Seq)
	}
	if ttl := m.Header.Get(natsjs.HeaderTTL); ttl == "" {
		t.Errorf("the scheduled message has no Nats-TTL (headers %v)", m.Header)
	}
}

// readStream is natstest.Read, tolerating a stream not created yet.
func readStream(t *testing.T, url, stream string) []natstest.Msg {
	t.Helper()
	js := natstest.JetStream(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.Stream(ctx, stream); err != nil {
		return nil
	}
	return natstest.Read(t, url, stream)
}

// TestIntegrationNATSTooOldForDeliverAt: the machine's nats-server (2.9)
// has no message schedules: with columns.deliver_at mapped the relay stops
// at connect, naming the version it needs, and sends nothing.
func TestIntegrationNATSTooOldForDeliverAt(t *testing.T) {
	t.Parallel()
	natsURL := natstest.Start(t)
	nc := natstest.Connect(t, natsURL)
	v := nc.ConnectedServerVersion()
	nc.Close()
	if !strings.HasPrefix(v, "2.9.") && !strings.HasPrefix(v, "2.10.") {
		t.Skipf("the machine's nats-server is %s, which has message schedules", v)
	}
	url := pgtest.URL(t)
	ob := scheduledOutbox(t, url)
	sinkYAML := fmt.Sprintf("  - {name: n, kind: nats, servers: [%q], subject: 'old.{type}', schedule_subject: old.scheduled}", natsURL)
	cfg := ob.Config(t, sinkYAML, scheduleColumns)
	cdcInit(t, cfg)
	insertScheduled(t, ob, scheduledMsg{Msg: relaytest.NewMsg("t", "k", 1), DeliverAt: time.Now().Add(time.Hour)})
	p := startCDC(t, "run", "--config", cfg)
	if code := p.Wait(60 * time.Second); code != 1 || !strings.Contains(p.Stderr.String(), "columns.deliver_at needs (nats-server 2.12.0 or later)") ||
		!strings.Contains(p.Stderr.String(), v) {
		t.Fatalf("exit %d, want 1 saying nats-server %s is too old for columns.deliver_at:\n%s", code, v, p.Stderr.String())
	}
}

// TestIntegrationReplayCarriesExpiresAt: cdc replay reads expires_at from
// the table (the keyset reader that recover, resync and gap fills share)
// and applies relay.on_expired: drop leaves an expired row out and counts
// it; send publishes it.
func TestIntegrationReplayCarriesExpiresAt(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := scheduledOutbox(t, url)
	expired := scheduledMsg{Msg: relaytest.NewMsg("t", "k", 1), ExpiresAt: time.Now().Add(-time.Minute)}
	fresh := scheduledMsg{Msg: relaytest.NewMsg("t", "k", 2), ExpiresAt: time.Now().Add(time.Hour)}
	insertScheduled(t, ob, expired, fresh)
	for _, policy := range []string{"drop", "send"} {
		out := filepath.Join(t.TempDir(), "out.jsonl")
		cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "columns: {expires_at: expires_at}\nrelay: {on_expired: "+policy+"}")
		code, _, stderr := cdc(t, nil, "replay", "--config", cfg, "--since", "1h")
		lines := readFile(t, out)
		if code != 0 || !strings.Contains(lines, fresh.ID) || strings.Contains(lines, expired.ID) != (policy == "send") {
			t.Fatalf("on_expired %s: exit %d, sink:\n%s\nstderr:\n%s", policy, code, lines, stderr)
		}
		if policy == "drop" && !strings.Contains(stderr, "1 expired (relay.on_expired)") {
			t.Fatalf("the summary does not count the expired row:\n%s", stderr)
		}
	}
}

// TestIntegrationEnvelopeDeliverAtToASinkThatCannotHoldBack: with the
// table-less envelope no column says at start whether messages carry a
// deliver_at; a file sink refuses the one whose deliver_at is still to
// come (relay.on_refused: dead_letter parks it) and delivers the others,
// one with a deliver_at past included: nothing is sent early.
func TestIntegrationEnvelopeDeliverAtToASinkThatCannotHoldBack(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	mo := relaytest.NewMessagesOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cfg := mo.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), "",
		"relay: {batch_size: 10, shutdown_timeout: 2s, on_refused: dead_letter, refused_attempts: 1}")
	relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	early := relaytest.NewMsg("t", "a", 1)
	past := relaytest.NewMsg("t", "b", 2)
	plain := relaytest.NewMsg("t", "c", 3)
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pgtest.Connect(t, url), func(tx pgx.Tx) error {
		for _, m := range []struct {
			relaytest.Msg
			at time.Time
		}{{past, time.Now().Add(-time.Minute)}, {early, time.Now().Add(time.Hour)}, {plain, time.Time{}}} {
			if err := outbox.Emit(ctx, tx, outbox.Message{ID: m.ID, Type: m.Type, Key: m.Key, Payload: json.RawMessage(m.Payload), DeliverAt: m.at},
				outbox.Prefix(mo.Prefix)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	p := startCDC(t, "run", "--config", cfg)
	if !pgtest.WaitFor(60*time.Second, func() bool { return p.Exited() || strings.Contains(readFile(t, out), plain.ID) }) || p.Exited() {
		t.Fatalf("the messages after the early one did not arrive (exited: %v)\n%s", p.Exited(), p.Stderr.String())
	}
	p.Stop(t)
	if lines := readFile(t, out); strings.Contains(lines, early.ID) || !strings.Contains(lines, past.ID) {
		t.Fatalf("the sink got:\n%s\nwant %s (deliver_at past) and not %s (an hour ahead)", lines, past.ID, early.ID)
	}
	parked := listParked(t, cfg)
	if len(parked) != 1 || parked[0].ID == nil || *parked[0].ID != early.ID || !strings.Contains(parked[0].Error, "cannot hold a message back") {
		t.Fatalf("parked %+v, want the early message", parked)
	}
}

// TestIntegrationNATSStreamWithoutTTLStops: columns.expires_at to a stream
// made without allow_msg_ttl (on a server that has per-message TTL) stops
// the relay saying how to allow it; nothing is stored without its TTL.
func TestIntegrationNATSStreamWithoutTTLStops(t *testing.T) {
	t.Parallel()
	natsURL := natstest.StartEmbedded(t)
	natstest.CreateStream(t, natsURL, jetstream.StreamConfig{Name: "NOTTL", Subjects: []string{"nottl.>"}})
	url := pgtest.URL(t)
	ob := scheduledOutbox(t, url)
	sinkYAML := fmt.Sprintf("  - {name: n, kind: nats, servers: [%q], subject: 'nottl.{type}', stream: {name: NOTTL}}", natsURL)
	cfg := ob.Config(t, sinkYAML, "columns: {expires_at: expires_at}")
	cdcInit(t, cfg)
	insertScheduled(t, ob, scheduledMsg{Msg: relaytest.NewMsg("t", "k", 1), ExpiresAt: time.Now().Add(time.Hour)})
	p := startCDC(t, "run", "--config", cfg)
	if code := p.Wait(60 * time.Second); code != 1 || !strings.Contains(p.Stderr.String(), "--allow-msg-ttl") {
		t.Fatalf("exit %d, want 1 saying how to allow per-message TTL:\n%s", code, p.Stderr.String())
	}
	if n := len(readStream(t, natsURL, "NOTTL")); n != 0 {
		t.Fatalf("the stream holds %d messages", n)
	}
}

// TestIntegrationResendKeepsDeliverAtAndExpiresAt: a scheduled message the
// broker refuses (too large for the stand-in's queue) is parked with its
// deliver_at and expires_at; after the queue takes it, `cdc dead-letter
// resend` sends it with both, so that it arrives no earlier than its
// deliver_at, with the time to live it has left. A parked message whose
// expires_at passes before it is resent follows relay.on_expired (drop,
// the default): not resent, it stays parked, and the command says so.
func TestIntegrationResendKeepsDeliverAtAndExpiresAt(t *testing.T) {
	t.Parallel()
	sb := sbfake.Start(t) // skips without node
	sb.CreateQueue(t, "resend", sbfake.QueueOptions{MaxMessageSize: 4096})
	url := pgtest.URL(t)
	ob := scheduledOutbox(t, url)
	sinkYAML := fmt.Sprintf("  - {name: sb, kind: servicebus, connection_string: %q, entity: resend, timeout: 5s}", sb.ConnectionString())
	cfg := ob.Config(t, sinkYAML, scheduleColumns+"\nrelay: {on_refused: dead_letter, refused_attempts: 1, shutdown_timeout: 2s}")
	relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)

	big := `{"pad": "` + strings.Repeat("x", 8<<10) + `"}` // over the queue's 4 KiB
	// Parking takes about 2 s; the expiring message must still be alive
	// then, and the resend must end before deliver_at.
	deliverAt := time.Now().Add(16 * time.Second).Truncate(time.Millisecond)
	scheduled := scheduledMsg{Msg: relaytest.NewMsg("t", "a", 1), DeliverAt: deliverAt, ExpiresAt: deliverAt.Add(time.Hour)}
	scheduled.Payload = big
	expiring := scheduledMsg{Msg: relaytest.NewMsg("t", "b", 2), ExpiresAt: time.Now().Add(10 * time.Second).Truncate(time.Millisecond)}
	expiring.Payload = big
	insertScheduled(t, ob, scheduled, expiring)
	p := startCDC(t, "run", "--config", cfg)
	var parked []parkedRow
	if !pgtest.WaitFor(60*time.Second, func() bool { parked = listParked(t, cfg); return len(parked) == 2 || p.Exited() }) || p.Exited() {
		t.Fatalf("parked %d of 2 refused messages (relay exited: %v)\n%s", len(parked), p.Exited(), p.Stderr.String())
	}
	p.Stop(t)
	if time.Now().After(expiring.ExpiresAt) {
		t.Fatalf("the messages were parked only at %s, after the second one's expires_at %s: the test cannot show the resend's expiry", time.Now(), expiring.ExpiresAt)
	}
	for _, r := range parked {
		var rec struct {
			DeliverAt *time.Time `json:"deliver_at"`
			ExpiresAt *time.Time `json:"expires_at"`
		}
		if err := json.Unmarshal(r.RowData, &rec); err != nil {
			t.Fatal(err)
		}
		want := scheduled
		if *r.ID == expiring.ID {
			want = expiring
		}
		if rec.ExpiresAt == nil || !rec.ExpiresAt.Equal(want.ExpiresAt) || (rec.DeliverAt != nil) != !want.DeliverAt.IsZero() ||
			rec.DeliverAt != nil && !rec.DeliverAt.Equal(want.DeliverAt) {
			t.Fatalf("parked record of %s has deliver_at %v, expires_at %v; want %s, %s", *r.ID, rec.DeliverAt, rec.ExpiresAt, want.DeliverAt, want.ExpiresAt)
		}
	}

	sb.CreateQueue(t, "resend", sbfake.QueueOptions{}) // now it takes 256 KiB
	code, stdout, stderr := cdc(t, nil, "dead-letter", "--config", cfg, "resend", scheduled.ID)
	if code != 0 || !strings.Contains(stdout, "resent  "+scheduled.ID) {
		t.Fatalf("resend %s: exit %d\n%s\n%s", scheduled.ID, code, stdout, stderr)
	}
	if !time.Now().Before(deliverAt) {
		t.Fatalf("resend ended at %s, after deliver_at %s: the test cannot tell a scheduled resend from one sent at once", time.Now(), deliverAt)
	}

	c, err := azservicebus.NewClientFromConnectionString(sb.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	r, err := c.NewReceiverForQueue("resend", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	var got *azservicebus.ReceivedMessage
	if !pgtest.WaitFor(90*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		msgs, _ := r.ReceiveMessages(ctx, 10, nil)
		cancel()
		for _, m := range msgs {
			if time.Now().Before(deliverAt) {
				t.Fatalf("message %s arrived at %s, before the resent message's deliver_at %s", m.MessageID, time.Now().Format(time.RFC3339Nano), deliverAt.Format(time.RFC3339Nano))
			}
			if m.MessageID != scheduled.ID {
				t.Fatalf("got message %s, want only the resent %s", m.MessageID, scheduled.ID)
			}
			got = m
		}
		return got != nil
	}) {
		t.Fatal("the resent message did not arrive")
	}
	if got.ScheduledEnqueueTime == nil || !got.ScheduledEnqueueTime.Equal(deliverAt) {
		t.Errorf("ScheduledEnqueueTime %v, want %s", got.ScheduledEnqueueTime, deliverAt)
	}
	if got.TimeToLive == nil || *got.TimeToLive <= 59*time.Minute || *got.TimeToLive > time.Hour {
		t.Errorf("TimeToLive %v, want about 1h (expires_at minus deliver_at)", got.TimeToLive)
	}

	// The other one has expired by now (deliver_at is after its expires_at).
	code, stdout, stderr = cdc(t, nil, "dead-letter", "--config", cfg, "resend", expiring.ID)
	if code != 1 || !strings.Contains(stdout, "failed  "+expiring.ID) || !strings.Contains(stdout, "relay.on_expired is drop") {
		t.Fatalf("resend of the expired %s: exit %d, want 1 and a failure naming relay.on_expired\n%s\n%s", expiring.ID, code, stdout, stderr)
	}
	for _, r := range listParked(t, cfg) {
		if *r.ID == expiring.ID && r.ResentAt != nil {
			t.Fatalf("the expired message was marked resent: %+v", r)
		}
	}
	if s := sb.Stats(t, "resend"); s.Stored != 1 {
		t.Fatalf("the queue stored %d messages, want 1 (the expired one not resent)", s.Stored)
	}
}

// TestIntegrationSQSScheduledMessageArrivesNoEarlier: a row whose
// deliver_at is 3 s ahead goes to an SQS queue (the stand-in, which
// honours DelaySeconds) with DelaySeconds, and no receive gets it before
// its deliver_at, while the row without one, written after it in the same
// transaction, arrives first. A row 20 minutes ahead, past the 15 minutes
// SQS can delay, is refused as docs/sinks/sqs.md says: with
// relay.on_refused: dead_letter it is parked with its deliver_at, never
// sent, and `cdc dead-letter resend` refuses it again while it is that far
// ahead.
func TestIntegrationSQSScheduledMessageArrivesNoEarlier(t *testing.T) {
	t.Parallel()
	srv := sqsfake.Start(t)
	srv.CreateQueue("sched", sqsfake.QueueOptions{})
	url := pgtest.URL(t)
	ob := scheduledOutbox(t, url)
	sinkYAML := fmt.Sprintf("  - {name: q, kind: sqs, queue: sched, region: us-east-1, endpoint: %q, max_retries: 0, timeout: 5s}", srv.URL())
	cfg := ob.Config(t, sinkYAML, scheduleColumns+"\nrelay: {on_refused: dead_letter, refused_attempts: 1, shutdown_timeout: 2s}")
	relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)

	deliverAt := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	later := scheduledMsg{Msg: relaytest.NewMsg("t", "a", 1), DeliverAt: deliverAt}
	tooFar := scheduledMsg{Msg: relaytest.NewMsg("t", "b", 2), DeliverAt: time.Now().Add(20 * time.Minute).Truncate(time.Millisecond)}
	now := scheduledMsg{Msg: relaytest.NewMsg("t", "c", 3)}
	insertScheduled(t, ob, later, tooFar, now)
	p := startCDC(t, "run", "--config", cfg)
	defer p.Stop(t)

	awsCfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	client := sqsapi.NewFromConfig(awsCfg, func(o *sqsapi.Options) { o.BaseEndpoint = aws.String(srv.URL()) })
	queueURL := srv.URL() + "/000000000000/sched"
	var order []string
	if !pgtest.WaitFor(60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		out, err := client.ReceiveMessage(ctx, &sqsapi.ReceiveMessageInput{QueueUrl: aws.String(queueURL), MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			id := aws.ToString(m.MessageAttributes[sqs.AttrID].StringValue)
			if id == later.ID && time.Now().Before(deliverAt) {
				t.Fatalf("the scheduled message arrived at %s, before its deliver_at %s", time.Now().Format(time.RFC3339Nano), deliverAt.Format(time.RFC3339Nano))
			}
			if id == tooFar.ID {
				t.Fatalf("the message 20 minutes ahead was sent (SQS delays at most 15 minutes)")
			}
			order = append(order, id)
		}
		return len(order) == 2 || p.Exited()
	}) || p.Exited() {
		t.Fatalf("received %v of 2 messages (relay exited: %v)\n%s", order, p.Exited(), p.Stderr.String())
	}
	if order[0] != now.ID || order[1] != later.ID {
		t.Fatalf("order %v, want %s (no deliver_at) then %s", order, now.ID, later.ID)
	}
	for _, m := range srv.Messages("sched") {
		if id := m.Attributes[sqs.AttrID]; (id == later.ID) != (m.DelaySeconds > 0) || m.DelaySeconds > 3 {
			t.Errorf("message %s stored with DelaySeconds %d", id, m.DelaySeconds)
		}
	}
	parked := listParked(t, cfg)
	if len(parked) != 1 || *parked[0].ID != tooFar.ID || parked[0].Sink != "q" || !strings.Contains(parked[0].Error, "15 minutes") {
		t.Fatalf("parked %+v, want %s for sink q, refused as over the 15 minutes", parked, tooFar.ID)
	}
	code, stdout, stderr := cdc(t, nil, "dead-letter", "--config", cfg, "resend", tooFar.ID)
	if code != 1 || !strings.Contains(stdout, "failed  "+tooFar.ID) || !strings.Contains(stdout, "15 minutes") {
		t.Fatalf("resend of the message 20 minutes ahead: exit %d, want 1 and a refusal naming the 15 minutes\n%s\n%s", code, stdout, stderr)
	}
	if n := len(srv.Messages("sched")); n != 2 {
		t.Fatalf("the queue holds %d messages after the refused resend, want 2", n)
	}
}
