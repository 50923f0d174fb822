package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/inbox/inboxnats"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
	"github.com/walpost/walpost/internal/publish/natsjs/natstest"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/outbox"
)

// appTracer is the tracer provider of the application around the relay
// (the test process): the producer that writes the outbox row and the
// receiver that processes the message, each its own service, exporting
// every span to j over OTLP/HTTP as it ends (the relay uses gRPC).
func appTracer(t *testing.T, j jaeger, service string) *sdktrace.TracerProvider {
	t.Helper()
	exp, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL("http://"+j.otlpHTTP+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp
}

// tracedRow is a row the producer wrote in its own span.
type tracedRow struct {
	ID, TraceID string
	Committed   time.Time // when its transaction's COMMIT returned
}

// produce writes one row of type typ to ob's table inside a "place
// order" span of tp, with outbox.Writer (which records the producer span
// and stores its traceparent in the row), and commits.
func produce(t *testing.T, ob relaytest.Outbox, tp trace.TracerProvider, typ string) tracedRow {
	t.Helper()
	ctx, root := tp.Tracer("shop").Start(t.Context(), "place order")
	defer root.End()
	conn := pgtest.Connect(t, ob.URL)
	id := outbox.NewID()
	w := outbox.Writer{Table: ob.Table, TracerProvider: tp}
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		return w.Enqueue(ctx, tx, outbox.Message{ID: id, Type: typ, Key: "cust-1", Payload: map[string]any{"total": 42}})
	}); err != nil {
		t.Fatal(err)
	}
	return tracedRow{ID: id, TraceID: root.SpanContext().TraceID().String(), Committed: time.Now()}
}

// receive processes one delivered message as a receiver does: inbox.Process
// continues the trace of the message's traceparent (the receive loops do
// the same with inbox.ContextFromHeaders), and the effect records its own
// span under Process's.
func receive(t *testing.T, url string, tp trace.TracerProvider, id, traceparent string) {
	t.Helper()
	table := "public." + pgtest.Name(t, "inbox")
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP TABLE IF EXISTS "+table) })
	ib, err := inbox.New(pgtest.Connect(t, url), inbox.Options{Table: table, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.EnsureTable(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx := inbox.ContextWithTraceparent(t.Context(), traceparent, "")
	if _, err := ib.Process(ctx, id, func(ctx context.Context, tx pgx.Tx) error {
		_, span := tp.Tracer("billing").Start(ctx, "apply order")
		defer span.End()
		_, err := tx.Exec(ctx, "SELECT 1")
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// checkChain checks that tr is one message's trace from the producer to
// the receiver's effect, as docs/operations.md ("Tracing") documents it:
//
//	place order (shop)
//	└─ create <outbox>           (shop, producer)
//	   ├─ publish <destination>  (walpost, producer: from the commit to the ack)
//	   └─ process <inbox>        (billing, consumer)
//	      └─ apply order         (billing)
//
// The publish span starts at the commit: before relayStarted, when the
// relay started after the commit. It returns the publish span.
func checkChain(t *testing.T, tr *jTrace, row tracedRow, system, dest string, relayStarted time.Time) jSpan {
	t.Helper()
	one := func(op string) jSpan {
		t.Helper()
		ss := tr.named(op)
		if len(ss) != 1 {
			t.Fatalf("trace %s has %d spans %q, want 1; its spans: %v", row.TraceID, len(ss), op, opNames(tr))
		}
		return ss[0]
	}
	root := one("place order")
	create := tr.Spans[slices.IndexFunc(tr.Spans, func(s jSpan) bool { return strings.HasPrefix(s.OperationName, "create ") })]
	publish := one("publish " + dest)
	process := tr.Spans[slices.IndexFunc(tr.Spans, func(s jSpan) bool { return strings.HasPrefix(s.OperationName, "process ") })]
	effect := one("apply order")
	for _, c := range []struct {
		child, parent jSpan
		service       string
	}{{create, root, "shop"}, {publish, create, "walpost"}, {process, create, "billing"}, {effect, process, "billing"}} {
		if c.child.parent() != c.parent.SpanID {
			t.Errorf("span %q is a child of %q, want of %q (%s)", c.child.OperationName, c.child.parent(), c.parent.OperationName, c.parent.SpanID)
		}
		if got := tr.service(c.child); got != c.service {
			t.Errorf("span %q is of service %q, want %q", c.child.OperationName, got, c.service)
		}
	}
	for k, want := range map[string]string{"messaging.system": system, "messaging.destination.name": dest, "messaging.message.id": row.ID,
		"walpost.outbox.id": row.ID, "walpost.outcome": "published", "span.kind": "producer"} {
		if got := publish.tag(k); got != want {
			t.Errorf("publish span: %s = %q, want %q", k, got, want)
		}
	}
	if publish.tag("walpost.commit_lsn") == "" || !strings.Contains(publish.tag("walpost.commit_lsn"), "/") {
		t.Errorf("publish span: walpost.commit_lsn = %q, want an LSN", publish.tag("walpost.commit_lsn"))
	}
	start := time.UnixMicro(publish.StartTime)
	if start.Before(time.UnixMicro(create.StartTime)) || !start.Before(relayStarted) || start.After(row.Committed) {
		t.Errorf("publish span starts at %v, want at the commit: after the producer's span started (%v), by the time COMMIT returned (%v), before the relay started (%v)",
			start, time.UnixMicro(create.StartTime), row.Committed, relayStarted)
	}
	if ev := publish.events(); len(ev) < 2 || ev[0] != "send" || ev[len(ev)-1] != "ack" {
		t.Errorf("publish span events %v, want send … ack", ev)
	}
	if process.StartTime < publish.StartTime {
		t.Errorf("the receiver's span starts before the publish span")
	}
	logWaterfall(t, tr)
	return publish
}

// logWaterfall logs tr's spans in start order, each under its parent
// (go test -v shows the waterfall docs/operations.md quotes).
func logWaterfall(t *testing.T, tr *jTrace) {
	spans := slices.Clone(tr.Spans)
	slices.SortFunc(spans, func(a, b jSpan) int { return int(a.StartTime - b.StartTime) })
	depth := map[string]int{}
	t0 := spans[0].StartTime
	var b strings.Builder
	for _, s := range spans {
		d := 0
		if p := s.parent(); p != "" {
			d = depth[p] + 1
		}
		depth[s.SpanID] = d
		fmt.Fprintf(&b, "\n%s%-28s %-8s +%8.3f ms %9.3f ms  %v", strings.Repeat("  ", d), s.OperationName, tr.service(s),
			float64(s.StartTime-t0)/1000, float64(s.Duration)/1000, s.events())
	}
	t.Logf("trace %s:%s", tr.TraceID, b.String())
}

func opNames(tr *jTrace) []string {
	var out []string
	for _, s := range tr.Spans {
		out = append(out, s.OperationName+"<"+tr.service(s)+">")
	}
	return out
}

// checkTraceparent checks that the broker message's traceparent tp is of
// row's trace (the producer span's, which the row carries).
func checkTraceparent(t *testing.T, tp string, row tracedRow) {
	t.Helper()
	if !strings.HasPrefix(tp, "00-"+row.TraceID+"-") {
		t.Fatalf("the broker message's traceparent %q is not of the producer's trace %s", tp, row.TraceID)
	}
}

// tracingYAML is the tracing block of a relay exporting to j.
func tracingYAML(j jaeger) string {
	return fmt.Sprintf("tracing: {enabled: true, endpoint: 'http://%s', protocol: grpc}", j.otlpGRPC)
}

// TestIntegrationTraceKafkaProducerRelayReceiverInJaeger: a row written
// in a producer span, relayed to Kafka (kfake) and processed with
// inbox.Process is one trace in Jaeger, read back from its query API:
// producer span → outbox create span → the relay's publish span (from the
// commit to the broker's ack) and the receiver's process span → the
// effect's span. A row without traceparent gets a well-formed root
// publish span of its own. The relay killed (SIGKILL) while a batch is
// being retried and restarted: the message's trace gets one publish span,
// still starting at the commit, with no half-open span from the killed run.
func TestIntegrationTraceKafkaProducerRelayReceiverInJaeger(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	shop, billing := appTracer(t, j, "shop"), appTracer(t, j, "billing")
	kc := kafkatest.Start(t, kfake.SeedTopics(1, "orders"))
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	cfg := ob.Config(t, fmt.Sprintf("  - {name: k, kind: kafka, brokers: [%s], topic: orders, timeout: 2s}", strings.Join(kc.Addrs(), ", ")),
		"relay: {batch_size: 10, retry_backoff: 200ms, shutdown_timeout: 2s}\n"+tracingYAML(j))
	cdcInit(t, cfg)

	row := produce(t, ob, shop, "orders")
	plain := relaytest.NewMsg("orders", "k", 2) // written without a span: no traceparent
	ob.InsertTx(t, pgtest.Connect(t, url), plain)
	relayStarted := time.Now()
	p := startCDC(t, "run", "--config", cfg)
	record := func(id string) *kgo.Record {
		for _, r := range kc.ReadAll(t, "orders") {
			if recordHeader(r, "id") == id {
				return r
			}
		}
		return nil
	}
	if !pgtest.WaitFor(60*time.Second, func() bool { return p.Exited() || record(plain.ID) != nil }) || p.Exited() {
		t.Fatalf("the rows did not reach Kafka (relay exited: %v)\n%s", p.Exited(), p.Stderr.String())
	}
	tp := recordHeader(record(row.ID), "traceparent")
	checkTraceparent(t, tp, row)
	receive(t, url, billing, row.ID, tp)
	tr := j.waitTrace(t, row.TraceID, func(tr *jTrace) bool { return len(tr.Spans) >= 5 })
	checkChain(t, tr, row, "kafka", "orders", relayStarted)

	// The row without traceparent: a root publish span, in a trace of its own.
	var roots []jTrace
	if !pgtest.WaitFor(30*time.Second, func() bool { roots = j.search(t, "walpost", "walpost.outbox.id", plain.ID); return len(roots) > 0 }) {
		t.Fatalf("no publish span in Jaeger for the row without traceparent")
	}
	if s := roots[0].Spans; len(roots) != 1 || len(s) != 1 || s[0].parent() != "" || s[0].OperationName != "publish orders" || s[0].tag("walpost.outcome") != "published" {
		t.Fatalf("the row without traceparent: %d traces, spans %v; want one root span publish orders", len(roots), opNames(&roots[0]))
	}

	// Killed while a batch is retried, then restarted.
	restore := kc.Outage(t)
	killed := produce(t, ob, shop, "orders")
	if !pgtest.WaitFor(60*time.Second, func() bool { return strings.Contains(p.Stderr.String(), "publish failed; retrying") }) {
		restore()
		t.Fatalf("the relay did not retry during the outage\n%s", p.Stderr.String())
	}
	p.Kill9(t)
	restore()
	restarted := time.Now()
	p = startCDC(t, "run", "--config", cfg)
	defer p.Stop(t)
	if !pgtest.WaitFor(60*time.Second, func() bool { return p.Exited() || record(killed.ID) != nil }) || p.Exited() {
		t.Fatalf("the row of the killed batch did not reach Kafka after the restart (exited: %v)\n%s", p.Exited(), p.Stderr.String())
	}
	receive(t, url, billing, killed.ID, recordHeader(record(killed.ID), "traceparent"))
	tr = j.waitTrace(t, killed.TraceID, func(tr *jTrace) bool { return len(tr.Spans) >= 5 })
	checkChain(t, tr, killed, "kafka", "orders", restarted)
}

// TestIntegrationTraceParkedAndResentInJaeger: a message the broker
// refuses (its topic, chosen by its type, does not exist) is parked: its
// publish span ends there with the refused and park events and an error
// status. Once the topic exists, cdc dead-letter resend publishes it in a
// span of its own (walpost.mode resend), in the same trace, under the
// same producer span; the receiver's effect joins it.
func TestIntegrationTraceParkedAndResentInJaeger(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	shop, billing := appTracer(t, j, "shop"), appTracer(t, j, "billing")
	kc := kafkatest.Start(t, kfake.SeedTopics(1, "orders"))
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	cfg := ob.Config(t, fmt.Sprintf("  - {name: k, kind: kafka, brokers: [%s], topic: '{type}', timeout: 2s}", strings.Join(kc.Addrs(), ", ")),
		"relay: {batch_size: 10, retry_backoff: 200ms, shutdown_timeout: 2s, on_refused: dead_letter, refused_attempts: 1}\n"+tracingYAML(j))
	relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)

	late := produce(t, ob, shop, "late") // no topic "late" yet
	after := relaytest.NewMsg("orders", "k", 2)
	ob.InsertTx(t, pgtest.Connect(t, url), after)
	p := startCDC(t, "run", "--config", cfg)
	delivered := func(topic, id string) *kgo.Record {
		for _, r := range kc.ReadAll(t, topic) {
			if recordHeader(r, "id") == id {
				return r
			}
		}
		return nil
	}
	if !pgtest.WaitFor(60*time.Second, func() bool { return p.Exited() || delivered("orders", after.ID) != nil }) || p.Exited() {
		t.Fatalf("the row after the refused one did not arrive (exited: %v)\n%s", p.Exited(), p.Stderr.String())
	}
	p.Stop(t)
	tr := j.waitTrace(t, late.TraceID, func(tr *jTrace) bool { return len(tr.named("publish late")) == 1 })
	parked := tr.named("publish late")[0]
	if parked.tag("walpost.outcome") != "parked" || parked.tag("error") != "true" || !slices.Contains(parked.events(), "park") || !slices.Contains(parked.events(), "refused") {
		t.Fatalf("the parked message's span: outcome %q, error %q, events %v; want parked, an error, refused and park events",
			parked.tag("walpost.outcome"), parked.tag("error"), parked.events())
	}

	createTopic(t, kc, "late")
	if code, out, errOut := cdc(t, nil, "dead-letter", "--config", cfg, "resend", late.ID); code != 0 {
		t.Fatalf("dead-letter resend: exit %d\n%s\n%s", code, out, errOut)
	}
	rec := delivered("late", late.ID)
	if rec == nil {
		t.Fatal("the resent message is not in topic late")
	}
	checkTraceparent(t, recordHeader(rec, "traceparent"), late)
	receive(t, url, billing, late.ID, recordHeader(rec, "traceparent"))
	tr = j.waitTrace(t, late.TraceID, func(tr *jTrace) bool {
		return len(tr.named("publish late")) == 2 && len(tr.named("apply order")) == 1
	})
	create := tr.Spans[slices.IndexFunc(tr.Spans, func(s jSpan) bool { return strings.HasPrefix(s.OperationName, "create ") })]
	var resent jSpan
	for _, s := range tr.named("publish late") {
		if s.parent() != create.SpanID {
			t.Errorf("publish span %s (%s) is not a child of the producer's create span", s.SpanID, s.tag("walpost.outcome"))
		}
		if s.tag("walpost.mode") == "resend" {
			resent = s
		}
	}
	if resent.tag("walpost.outcome") != "published" || resent.StartTime < parked.StartTime+parked.Duration {
		t.Fatalf("no resend span published after the park: %+v", resent)
	}
}

// createTopic creates topic in kc.
func createTopic(t *testing.T, kc *kafkatest.Cluster, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 1, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(t.Context(), cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("creating topic %s: %+v", topic, resp.Topics)
	}
}

// TestIntegrationTraceNATSProducerRelayReceiverInJaeger: the same one
// trace through NATS JetStream (the machine's server), the receiver being
// inboxnats.Loop, which continues the trace from the message's headers.
func TestIntegrationTraceNATSProducerRelayReceiverInJaeger(t *testing.T) {
	t.Parallel()
	natsURL := natstest.Start(t) // skips without a NATS server
	j := startJaeger(t)
	shop, billing := appTracer(t, j, "shop"), appTracer(t, j, "billing")
	prefix := natstest.Unique(t)
	subject := prefix + ".orders"
	natstest.CreateStream(t, natsURL, jetstream.StreamConfig{Name: prefix, Subjects: []string{prefix + ".>"}, Storage: jetstream.MemoryStorage})
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	cfg := ob.Config(t, fmt.Sprintf("  - {name: n, kind: nats, servers: [%q], subject: %q, ack_timeout: 2s}", natsURL, subject),
		"relay: {batch_size: 10, retry_backoff: 200ms, shutdown_timeout: 2s}\n"+tracingYAML(j))
	cdcInit(t, cfg)
	row := produce(t, ob, shop, "orders")
	relayStarted := time.Now()
	p := startCDC(t, "run", "--config", cfg)
	defer p.Stop(t)

	table := "public." + pgtest.Name(t, "inbox")
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP TABLE IF EXISTS "+table) })
	ib, err := inbox.New(pgtest.Connect(t, url), inbox.Options{Table: table, TracerProvider: billing})
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.EnsureTable(t.Context()); err != nil {
		t.Fatal(err)
	}
	js := natstest.JetStream(t, natsURL)
	cons, err := js.CreateOrUpdateConsumer(t.Context(), prefix, jetstream.ConsumerConfig{Durable: prefix + "_billing", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	got := make(chan string, 10)
	loopDone := make(chan error, 1)
	go func() {
		loopDone <- inboxnats.Loop(ctx, cons, ib, func(ctx context.Context, tx pgx.Tx, m jetstream.Msg) error {
			_, span := billing.Tracer("billing").Start(ctx, "apply order")
			defer span.End()
			if tp := m.Headers().Get("traceparent"); !strings.HasPrefix(tp, "00-"+row.TraceID+"-") {
				t.Errorf("the NATS message's traceparent %q is not of the producer's trace %s", tp, row.TraceID)
			}
			got <- m.Headers().Get(jetstream.MsgIDHeader)
			return nil
		}, inboxnats.Options{})
	}()
	select {
	case id := <-got:
		if id != row.ID {
			t.Fatalf("the receiver got %s, want %s", id, row.ID)
		}
	case err := <-loopDone:
		t.Fatalf("inboxnats.Loop ended: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatalf("the message did not reach the receiver\n%s", p.Stderr.String())
	}
	tr := j.waitTrace(t, row.TraceID, func(tr *jTrace) bool { return len(tr.Spans) >= 5 })
	checkChain(t, tr, row, "nats", subject, relayStarted)
}

// TestIntegrationTracingExporterDownLosesNoMessage: with tracing on and
// no OTLP receiver listening (and a queue of one span), every message is
// delivered as without tracing, and the spans that could not go are
// dropped and counted in walpost_tracing_spans_dropped_total.
func TestIntegrationTracingExporterDownLosesNoMessage(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	addr := freeAddr(t)
	cfg := ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out),
		fmt.Sprintf("http: {listen: '%s'}\ntracing: {enabled: true, endpoint: 'http://%s', sample_ratio: 1, queue_size: 1}", addr, freeAddr(t)))
	cdcInit(t, cfg)
	var msgs []relaytest.Msg
	for i := range 300 {
		msgs = append(msgs, relaytest.NewMsg("orders", strconv.Itoa(i%7), i))
	}
	ob.InsertTx(t, pgtest.Connect(t, url), msgs...)
	p := startCDC(t, "run", "--config", cfg)
	defer p.Stop(t)
	if !pgtest.WaitFor(60*time.Second, func() bool { return p.Exited() || len(relaytest.ReadLines(t, out)) >= len(msgs) }) || p.Exited() {
		t.Fatalf("%d of %d messages delivered with the exporter down (exited: %v)\n%s", len(relaytest.ReadLines(t, out)), len(msgs), p.Exited(), p.Stderr.String())
	}
	dropped := regexp.MustCompile(`(?m)^walpost_tracing_spans_dropped_total\{reason="queue_full"\} (\d+)`)
	var n int
	if !pgtest.WaitFor(30*time.Second, func() bool {
		_, _, body := get(t, addr, "/metrics", "")
		if m := dropped.FindStringSubmatch(body); m != nil {
			n, _ = strconv.Atoi(m[1])
		}
		return n > 0
	}) {
		_, _, body := get(t, addr, "/metrics", "")
		t.Fatalf("no dropped span counted with the exporter down and a queue of one:\n%s", grepLines(body, "walpost_tracing"))
	}
}

// TestIntegrationFleetTracesEverySourceInJaeger: a process of two sources
// (cdc run --config DIR), tracing: set in one file only, records the
// publish spans of both, as one relay does: each source's rows, written
// in producer spans, reach its file sink with their traceparent, and
// Jaeger has for each row's trace one publish span, a child of the row's
// create span, naming its source (walpost.source) and sink.
func TestIntegrationFleetTracesEverySourceInJaeger(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	shop := appTracer(t, j, "shop")
	serverURL := pgtest.URL(t)
	dir := t.TempDir()
	file := "  - {name: out, kind: file, path: {out}}"
	orders := addFleetSource(t, dir, serverURL, "orders", file, "relay: {shutdown_timeout: 2s}\n"+tracingYAML(j))
	billing := addFleetSource(t, dir, serverURL, "billing", file, "relay: {shutdown_timeout: 2s}")
	sources := []fleetSource{orders, billing}
	rows := map[string][]tracedRow{}
	for _, s := range sources {
		for range 2 {
			rows[s.name] = append(rows[s.name], produce(t, s.ob, shop, s.name))
		}
	}
	p := startCDC(t, "run", "--config", dir)
	defer p.Stop(t)
	for _, s := range sources { // and one row each while the process runs
		rows[s.name] = append(rows[s.name], produce(t, s.ob, shop, s.name))
	}
	for _, s := range sources {
		var lines []relaytest.Line
		if !pgtest.WaitFor(60*time.Second, func() bool { lines = relaytest.ReadLines(t, s.out); return len(lines) >= len(rows[s.name]) }) {
			t.Fatalf("source %s: %d of %d rows delivered\n%s", s.name, len(lines), len(rows[s.name]), p.Stderr.String())
		}
		tps := map[string]string{}
		for _, l := range lines {
			tps[l.ID] = l.Headers["traceparent"]
		}
		for _, row := range rows[s.name] {
			checkTraceparent(t, tps[row.ID], row)
			dest := "publish " + s.out
			tr := j.waitTrace(t, row.TraceID, func(tr *jTrace) bool { return len(tr.named(dest)) > 0 })
			pubs := tr.named(dest)
			i := slices.IndexFunc(tr.Spans, func(s jSpan) bool { return strings.HasPrefix(s.OperationName, "create ") })
			if len(pubs) != 1 || i < 0 {
				t.Fatalf("source %s, row %s: trace %s has spans %v, want one create and one %q", s.name, row.ID, row.TraceID, opNames(tr), dest)
			}
			pub := pubs[0]
			if pub.parent() != tr.Spans[i].SpanID || tr.service(pub) != "walpost" {
				t.Errorf("source %s, row %s: publish span of service %q, child of %q, want walpost's, child of the create span %s",
					s.name, row.ID, tr.service(pub), pub.parent(), tr.Spans[i].SpanID)
			}
			for k, want := range map[string]string{"walpost.source": s.name, "walpost.sink": "out", "walpost.outbox.id": row.ID,
				"walpost.outcome": "published", "messaging.destination.name": s.out} {
				if got := pub.tag(k); got != want {
					t.Errorf("source %s, row %s: publish span %s = %q, want %q", s.name, row.ID, k, got, want)
				}
			}
		}
	}
}

// TestIntegrationFleetConsoleResendNamesItsSourceInJaeger: in a process of
// two sources, a message source orders parks (its topic does not exist
// yet) is resent from the console once the topic exists; the resend's
// publish span is in the row's trace and names the source
// (walpost.source), as the relay's own spans of the source do.
func TestIntegrationFleetConsoleResendNamesItsSourceInJaeger(t *testing.T) {
	t.Parallel()
	j := startJaeger(t)
	shop := appTracer(t, j, "shop")
	kc := kafkatest.Start(t, kfake.SeedTopics(1, "orders"))
	port, err := pgtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	serverURL := pgtest.URL(t)
	dir := t.TempDir()
	orders := addFleetSource(t, dir, serverURL, "orders",
		fmt.Sprintf("  - {name: k, kind: kafka, brokers: [%s], topic: '{type}', timeout: 2s}", strings.Join(kc.Addrs(), ", ")),
		"relay: {retry_backoff: 200ms, shutdown_timeout: 2s, on_refused: dead_letter, refused_attempts: 1}\n"+tracingYAML(j)+
			fmt.Sprintf("\nhttp: {listen: '%s', console: true, operate_token: %s}", addr, consoleOperateToken))
	relaytest.WithDeadLetterTable(t, orders.url, orders.cfg)
	cdcInit(t, orders.cfg) // again: the dead-letter table
	addFleetSource(t, dir, serverURL, "billing", "  - {name: out, kind: file, path: {out}}", "relay: {shutdown_timeout: 2s}")

	late := produce(t, orders.ob, shop, "late") // no topic "late" yet
	p := startCDC(t, "run", "--config", dir)
	defer p.Stop(t)
	pgtest.Await(t, 60*time.Second, "the message parked", func() bool { return len(listParked(t, orders.cfg)) == 1 })
	createTopic(t, kc, "late")

	cs := &consoleSetup{addr: addr, relay: p}
	src := "/api/v1/sources/orders"
	_, body := cs.api(t, "GET", src, consoleOperateToken, "", "")
	var d struct {
		Groups []struct {
			ID string `json:"id"`
		} `json:"groups"`
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil || len(d.Groups) != 1 {
		t.Fatalf("GET %s: %v, want one group\n%s", src, err, body)
	}
	_, sess := cs.api(t, "GET", "/api/v1/session", consoleOperateToken, "", "")
	if code, body := cs.api(t, "POST", src+"/resend", consoleOperateToken, csrfOf(t, sess), `{"group": "`+d.Groups[0].ID+`"}`); code != http.StatusOK {
		t.Fatalf("console resend: %d\n%s", code, body)
	}
	tr := j.waitTrace(t, late.TraceID, func(tr *jTrace) bool { return len(tr.named("publish late")) == 2 })
	var resent *jSpan
	for _, s := range tr.named("publish late") {
		if s.tag("walpost.source") != "orders" {
			t.Errorf("publish span %s (mode %q) names source %q, want orders", s.SpanID, s.tag("walpost.mode"), s.tag("walpost.source"))
		}
		if s.tag("walpost.mode") == "resend" {
			resent = &s
		}
	}
	if resent == nil || resent.tag("walpost.outcome") != "published" {
		t.Fatalf("no published resend span in the trace: %v", opNames(tr))
	}
}
