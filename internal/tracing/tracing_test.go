package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.yaml.in/yaml/v3"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

const (
	sampledTP   = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	unsampledTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
)

func TestParseTraceparentTakesOnlyW3CTraceparents(t *testing.T) {
	for tp, ok := range map[string]bool{
		sampledTP:   true,
		unsampledTP: true,
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra": true,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra": false, // version 00 is 55 characters
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":       false,
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":       false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":       false,
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01":       false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01":       false,
		"": false, "garbage": false,
	} {
		sc, got := ParseTraceparent(tp)
		if got != ok {
			t.Errorf("ParseTraceparent(%q): ok %v, want %v", tp, got, ok)
		}
		if ok && (sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsRemote()) {
			t.Errorf("ParseTraceparent(%q) = %v", tp, sc)
		}
	}
}

func msgWith(tp string, id string) *message.Message {
	m := &message.Message{ID: id, Type: "orders", CommitTime: time.Now().Add(-time.Second), CommitLSN: 0x16B3748, LSN: 0x16B3700}
	if tp != "" {
		m.Headers = map[string]string{TraceparentHeader: tp}
	}
	return m
}

func TestSamplerDecidesFromTheRowAlone(t *testing.T) {
	for _, c := range []struct {
		sampler string
		ratio   float64
		tp      string
		want    bool
	}{
		{"parentbased_traceidratio", 0, sampledTP, true},
		{"parentbased_traceidratio", 1, unsampledTP, false},
		{"parentbased_traceidratio", 1, "", true},
		{"parentbased_traceidratio", 0, "", false},
		{"parentbased_always_on", 0, "", true},
		{"parentbased_always_off", 1, "", false},
		{"parentbased_always_off", 1, sampledTP, true},
		{"traceidratio", 1, unsampledTP, true},
		{"traceidratio", 0, sampledTP, false},
		{"always_on", 0, unsampledTP, true},
		{"always_off", 1, sampledTP, false},
	} {
		s := NewSampler(c.sampler, c.ratio)
		if _, got := s.Sample(msgWith(c.tp, "id-1")); got != c.want {
			t.Errorf("%s(%v), traceparent %q: sampled %v, want %v", c.sampler, c.ratio, c.tp, got, c.want)
		}
	}
	// A ratio keeps about its share of the rows without traceparent, and
	// decides the same for the same row every time.
	s := NewSampler("parentbased_traceidratio", 0.1)
	kept := 0
	for i := range 20000 {
		m := msgWith("", fmt.Sprintf("0190a7c2-0000-7000-8000-%012d", i))
		_, a := s.Sample(m)
		_, b := s.Sample(m)
		if a != b {
			t.Fatalf("row %s: sampled %v, then %v", m.ID, a, b)
		}
		if a {
			kept++
		}
	}
	if kept < 1600 || kept > 2400 {
		t.Errorf("ratio 0.1 kept %d of 20000 rows", kept)
	}
}

func sinkConfig(t testing.TB, y string) *config.Sink {
	t.Helper()
	var s config.Sink
	if err := yaml.Unmarshal([]byte(y), &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// TestSinkRecordsOnePublishSpanPerMessageFromCommitToAck: the span of each
// sampled message is a child of its traceparent, starts at its commit,
// carries the retries as events and ends at the ack, a refusal (parked,
// an error) or a hold; a row without traceparent gets a root span; a row
// whose traceparent is not sampled gets none.
func TestSinkRecordsOnePublishSpanPerMessageFromCommitToAck(t *testing.T) {
	p, exp := newTestProvider(NewSampler("parentbased_traceidratio", 1))
	tr := p.Sink(sinkConfig(t, "{name: k, kind: kafka, topic: 'out.{type}'}"), Relay)
	ok, root, skip := msgWith(sampledTP, "a"), msgWith("", "b"), msgWith(unsampledTP, "c")
	refused, held := msgWith(sampledTP, "d"), msgWith(sampledTP, "e")
	batch := []publish.Delivery{{Msg: ok}, {Msg: root}, {Msg: skip}, {Msg: refused}, {Msg: held}}
	tr.Batch(batch)
	tr.Retry([]*message.Message{ok, root, skip, refused, held}, 1, errors.New("broker down"), 100*time.Millisecond)
	tr.Acked(batch[:3])
	tr.Refused(batch[3], errors.New("too large"))
	tr.Held(batch[4])

	spans := exp.GetSpans()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4 (the unsampled row has none)", len(spans))
	}
	byID := map[string]int{}
	for i, s := range spans {
		for _, a := range s.Attributes {
			if a.Key == "walpost.outbox.id" {
				byID[a.Value.AsString()] = i
			}
		}
		if s.Name != "publish out.orders" || s.SpanKind != trace.SpanKindProducer {
			t.Errorf("span %q of kind %v, want publish out.orders, producer", s.Name, s.SpanKind)
		}
	}
	attr := func(i int, key string) string {
		for _, a := range spans[i].Attributes {
			if string(a.Key) == key {
				return a.Value.Emit()
			}
		}
		return ""
	}
	events := func(i int) []string {
		var out []string
		for _, e := range spans[i].Events {
			out = append(out, e.Name)
		}
		return out
	}
	a := byID["a"]
	if !spans[a].StartTime.Equal(ok.CommitTime) || spans[a].Parent.SpanID().String() != "00f067aa0ba902b7" ||
		spans[a].SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("span a: start %v (commit %v), parent %v", spans[a].StartTime, ok.CommitTime, spans[a].Parent)
	}
	for k, want := range map[string]string{"messaging.system": "kafka", "messaging.destination.name": "out.orders", "messaging.message.id": "a",
		"walpost.commit_lsn": pglogrepl.LSN(0x16B3748).String(), "walpost.outcome": "published", "walpost.attempts": "2", "walpost.retries": "1"} {
		if got := attr(a, k); got != want {
			t.Errorf("span a: %s = %q, want %q", k, got, want)
		}
	}
	if got := events(a); !slices.Equal(got, []string{"send", "retry", "ack"}) {
		t.Errorf("span a: events %v", got)
	}
	if b := byID["b"]; spans[b].Parent.IsValid() {
		t.Errorf("the row without traceparent: span with parent %v, want a root", spans[b].Parent)
	}
	d := byID["d"]
	if spans[d].Status.Code != codes.Error || attr(d, "walpost.outcome") != "parked" || !slices.Equal(events(d), []string{"send", "retry", "refused", "park"}) {
		t.Errorf("refused span: status %v, outcome %q, events %v", spans[d].Status, attr(d, "walpost.outcome"), events(d))
	}
	if e := byID["e"]; attr(e, "walpost.outcome") != "held" || !slices.Contains(events(e), "held") {
		t.Errorf("held span: outcome %q, events %v", attr(e, "walpost.outcome"), events(e))
	}
	if len(tr.(*Sink).events) != 0 {
		t.Errorf("%d messages' events kept after their spans ended", len(tr.(*Sink).events))
	}
}

// TestWithSourceNamesTheSourceOnEachSpan: the spans of a fleet's source
// (Provider.WithSource) carry walpost.source; those of the provider
// itself (one relay) carry none; WithSource of tracing off is off.
func TestWithSourceNamesTheSourceOnEachSpan(t *testing.T) {
	p, exp := newTestProvider(NewSampler("always_on", 1))
	sink := sinkConfig(t, "{name: k, kind: kafka, topic: out}")
	for _, pp := range []*Provider{p.WithSource("orders"), p, p.WithSource("billing")} {
		tr := pp.Sink(sink, Relay)
		batch := []publish.Delivery{{Msg: msgWith(sampledTP, "a")}}
		tr.Batch(batch)
		tr.Acked(batch)
	}
	var got []string
	for _, s := range exp.GetSpans() {
		src := "-"
		for _, a := range s.Attributes {
			if a.Key == "walpost.source" {
				src = a.Value.AsString()
			}
		}
		got = append(got, src)
	}
	if !slices.Equal(got, []string{"orders", "-", "billing"}) {
		t.Errorf("walpost.source of the spans %v, want orders, none, billing", got)
	}
	if (*Provider)(nil).WithSource("orders") != nil {
		t.Error("WithSource of a nil provider (tracing off) is not nil")
	}
}

// TestResolveTakesTheBlockThenOTELVariables: the tracing: block wins over
// the OTEL_* variables, which fill what it leaves out; off by default;
// OTEL_SDK_DISABLED turns it off.
func TestResolveTakesTheBlockThenOTELVariables(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	s, err := Resolve(nil, env(nil))
	if err != nil || s.Enabled || s.Protocol != "grpc" || s.Sampler != "parentbased_traceidratio" || s.SampleRatio != 1 || s.QueueSize != 2048 || s.ServiceName != "walpost" {
		t.Fatalf("defaults: %+v, %v", s, err)
	}
	s, err = Resolve(nil, env(map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01", "OTEL_SERVICE_NAME": "relay-eu", "OTEL_BSP_MAX_QUEUE_SIZE": "100"}))
	if err != nil || !s.Enabled || s.Protocol != "http/protobuf" || s.Sampler != "traceidratio" || s.SampleRatio != 0.01 || s.ServiceName != "relay-eu" || s.QueueSize != 100 {
		t.Fatalf("from OTEL_*: %+v, %v", s, err)
	}
	on, ratio := true, 0.5
	s, err = Resolve(&config.Tracing{Enabled: &on, Protocol: "grpc", SampleRatio: &ratio}, env(map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_TRACES_SAMPLER_ARG": "0.01"}))
	if err != nil || !s.Enabled || s.Protocol != "grpc" || s.SampleRatio != 0.5 {
		t.Fatalf("the block over OTEL_*: %+v, %v", s, err)
	}
	s, _ = Resolve(&config.Tracing{Enabled: &on}, env(map[string]string{"OTEL_SDK_DISABLED": "true"}))
	if s.Enabled {
		t.Fatal("OTEL_SDK_DISABLED=true left tracing on")
	}
	if _, err := Resolve(nil, env(map[string]string{"OTEL_TRACES_SAMPLER": "sometimes"})); err == nil {
		t.Fatal("OTEL_TRACES_SAMPLER=sometimes accepted")
	}
}

// TestNewIsNilWhenOff: tracing off is a nil provider, whose Sink is nil:
// the runner then calls no tracer at all.
func TestNewIsNilWhenOff(t *testing.T) {
	p, err := New(context.Background(), Settings{}, "test", nil, zerolog.New(os.Stderr))
	if p != nil || err != nil {
		t.Fatalf("New(off) = %v, %v", p, err)
	}
	if tr := p.Sink(sinkConfig(t, "{name: k, kind: kafka, topic: t}"), Relay); tr != nil {
		t.Fatalf("nil provider's Sink = %v, want nil", tr)
	}
	p.Shutdown(time.Second)
}
