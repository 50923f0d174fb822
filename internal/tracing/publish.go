package tracing

import (
	"context"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/nametmpl"
)

// The span attributes walpost adds to the messaging semantic conventions'
// (docs/operations.md, "Tracing").
const (
	attrOutboxID  = attribute.Key("walpost.outbox.id")
	attrType      = attribute.Key("walpost.outbox.type")
	attrKey       = attribute.Key("walpost.outbox.key")
	attrCommitLSN = attribute.Key("walpost.commit_lsn")
	attrLSN       = attribute.Key("walpost.lsn")
	attrSeq       = attribute.Key("walpost.seq")
	attrSink      = attribute.Key("walpost.sink")
	attrOutcome   = attribute.Key("walpost.outcome")
	attrAttempts  = attribute.Key("walpost.attempts")
	attrRetries   = attribute.Key("walpost.retries")
	attrMode      = attribute.Key("walpost.mode")
	attrWaitMS    = attribute.Key("walpost.outbox_wait_ms")
	attrSource    = attribute.Key("walpost.source")
)

// maxEvents bounds the retry events kept for one message's span (the
// count is always in walpost.retries).
const maxEvents = 8

// Sink is the publish.Tracer of one sink: it builds one publish span per
// message it samples, at the message's acknowledgement, refusal or park.
// Used from the sink's runner goroutine only.
type Sink struct {
	p      *Provider
	name   string
	system attribute.KeyValue
	dest   *nametmpl.Template // nil: fixed, in destName
	// destName is the fixed destination, or the template's text when a
	// message's name cannot be expanded.
	destName string
	mode     Mode
	// The batch being published: when it started, and the failures of
	// its Publish calls for the sampled messages.
	started time.Time
	events  map[*message.Message]*pending
	attrs   []attribute.KeyValue // reused for each span's start attributes
}

// pending is what happened to one sampled message before its end.
type pending struct {
	retries int
	events  []event
}

type event struct {
	at      time.Time
	attempt int
	err     string
	wait    time.Duration
}

// Sink returns the tracer of sink s (nil when p is nil: tracing off). mode
// says which command publishes.
func (p *Provider) Sink(s *config.Sink, mode Mode) publish.Tracer {
	if p == nil {
		return nil
	}
	t := &Sink{p: p, name: s.Name, system: attribute.String("messaging.system", system(s.Kind)), mode: mode,
		events: map[*message.Message]*pending{}}
	t.destName = destination(s)
	if strings.Contains(t.destName, "{") {
		tmpl, err := nametmpl.Parse("destination", t.destName, nametmpl.Rules{Broker: s.Kind, MaxLen: 1 << 16,
			LegalChar: func(byte) bool { return true }, Allowed: "any"})
		if err == nil && !tmpl.Fixed() {
			t.dest = tmpl
		}
	}
	return t
}

// system is messaging.system for a sink kind (the semantic conventions'
// value where there is one).
func system(kind string) string {
	switch kind {
	case "sqs":
		return "aws_sqs"
	case "sns":
		return "aws.sns"
	case "pubsub":
		return "gcp_pubsub"
	case "servicebus":
		return "servicebus"
	case "kafka", "rabbitmq", "nats":
		return kind
	}
	return kind // webhook, file: walpost's own
}

// destination is the sink's configured destination (a template keeps its
// placeholders), without credentials.
func destination(s *config.Sink) string {
	switch s.Kind {
	case "rabbitmq":
		return s.Setting("exchange")
	case "webhook":
		if u, err := url.Parse(s.Setting("url")); err == nil {
			return u.Host + u.Path
		}
		return ""
	case "sns":
		return s.Setting("topic_arn")
	}
	for _, k := range []string{"topic", "subject", "queue", "entity", "path"} {
		if v := s.Setting(k); v != "" {
			return v
		}
	}
	return ""
}

// Batch notes when the batch's first Publish call starts (publish.Tracer).
func (t *Sink) Batch([]publish.Delivery) {
	t.started = time.Now()
	clear(t.events)
}

// Retry records a retry event on each sampled message of msgs
// (publish.Tracer).
func (t *Sink) Retry(msgs []*message.Message, attempt int, err error, wait time.Duration) {
	now := time.Now()
	var text string
	for _, m := range msgs {
		if _, ok := t.p.sampler.Sample(m); !ok {
			continue
		}
		if text == "" {
			text = err.Error()
		}
		pe := t.events[m]
		if pe == nil {
			pe = &pending{}
			t.events[m] = pe
		}
		pe.retries++
		if len(pe.events) < maxEvents {
			pe.events = append(pe.events, event{at: now, attempt: attempt, err: text, wait: wait})
		}
	}
}

// Acked ends the span of each sampled message of batch: the broker
// acknowledged it (publish.Tracer).
func (t *Sink) Acked(batch []publish.Delivery) {
	now := time.Now()
	for _, d := range batch {
		t.end(d.Msg, now, "published", nil)
	}
}

// Refused ends d's span: refused for good, parked (publish.Tracer).
func (t *Sink) Refused(d publish.Delivery, err error) { t.end(d.Msg, time.Now(), "parked", err) }

// Held ends d's span: parked behind its held key (publish.Tracer).
func (t *Sink) Held(d publish.Delivery) { t.end(d.Msg, time.Now(), "held", nil) }

// end records m's publish span, ending at now with outcome, when m is
// sampled.
func (t *Sink) end(m *message.Message, now time.Time, outcome string, refusal error) {
	parent, ok := t.p.sampler.Sample(m)
	if !ok {
		return
	}
	ctx := context.Background()
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	sent := t.started
	if sent.IsZero() || sent.After(now) {
		sent = now
	}
	start := m.CommitTime
	if t.mode != Relay || start.IsZero() || start.After(sent) {
		start = sent // a replay or resend: the outbox wait is long past
	}
	dest := t.destName
	if t.dest != nil {
		if name, err := t.dest.Expand(m); err == nil {
			dest = name
		}
	}
	pe := t.events[m]
	delete(t.events, m)
	attempts := 1
	if pe != nil {
		attempts += pe.retries
	}
	t.attrs = append(t.attrs[:0], t.system,
		attribute.String("messaging.destination.name", dest),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.operation.name", "publish"),
		attribute.String("messaging.message.id", m.ID),
		attribute.Int("messaging.message.body.size", len(m.Payload)),
		attrOutboxID.String(m.ID), attrType.String(m.Type),
		attrCommitLSN.String(m.CommitLSN.String()), attrLSN.String(m.LSN.String()), attrSeq.Int(int(m.Seq)),
		attrSink.String(t.name), attrOutcome.String(outcome), attrAttempts.Int(attempts),
		attrWaitMS.Int64(sent.Sub(start).Milliseconds()))
	if m.HasKey {
		t.attrs = append(t.attrs, attrKey.String(m.Key))
	}
	if t.mode != Relay {
		t.attrs = append(t.attrs, attrMode.String(t.mode.String()))
	}
	if t.p.source != "" {
		t.attrs = append(t.attrs, attrSource.String(t.p.source))
	}
	if pe != nil {
		t.attrs = append(t.attrs, attrRetries.Int(pe.retries))
	}
	_, span := t.p.tracer.Start(ctx, "publish "+dest, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithTimestamp(start), trace.WithAttributes(t.attrs...))
	span.AddEvent("send", trace.WithTimestamp(sent))
	if pe != nil {
		for _, e := range pe.events {
			span.AddEvent("retry", trace.WithTimestamp(e.at), trace.WithAttributes(
				attribute.Int("walpost.attempt", e.attempt), attribute.String("exception.message", e.err),
				attribute.Int64("walpost.retry_in_ms", e.wait.Milliseconds())))
		}
	}
	switch outcome {
	case "published":
		span.AddEvent("ack", trace.WithTimestamp(now))
	case "parked":
		span.AddEvent("refused", trace.WithTimestamp(now), trace.WithAttributes(attribute.String("exception.message", refusal.Error())))
		span.AddEvent("park", trace.WithTimestamp(now))
		span.SetStatus(codes.Error, "refused by the sink for good; parked in the dead-letter table")
	case "held":
		span.AddEvent("held", trace.WithTimestamp(now), trace.WithAttributes(attrKey.String(m.OrderingKey())))
	}
	span.End(trace.WithTimestamp(now))
}

// String names the mode in walpost.mode.
func (m Mode) String() string {
	switch m {
	case Replay:
		return "replay"
	case Resend:
		return "resend"
	}
	return "relay"
}
