package config

import (
	"strings"
	"testing"
)

// TestTracingErrorsNameTheKey: each bad tracing: setting is refused with
// its key; a good block parses, its headers are secrets, and a sink's
// settings are readable for the spans' destination.
func TestTracingErrorsNameTheKey(t *testing.T) {
	for _, c := range []struct{ block, want string }{
		{"tracing: {protocol: http/json}", "tracing.protocol: \"http/json\" is not grpc or http/protobuf"},
		{"tracing: {endpoint: 'ftp://x:1'}", "tracing.endpoint"},
		{"tracing: {protocol: http/protobuf, endpoint: 'collector:4318'}", "tracing.endpoint: \"collector:4318\": http/protobuf needs a URL"},
		{"tracing: {sampler: sometimes}", "tracing.sampler: \"sometimes\" is not one of parentbased_traceidratio"},
		{"tracing: {sample_ratio: 1.5}", "tracing.sample_ratio: 1.5 is outside 0..1"},
		{"tracing: {queue_size: -1}", "tracing.queue_size"},
		{"tracing: {enable: true}", "enable"},
	} {
		_, err := Parse([]byte(minimal+c.block+"\n"), env(nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to contain %q", c.block, err, c.want)
		}
	}
	cfg, err := Parse([]byte(minimal+"tracing: {enabled: true, endpoint: 'http://otel:4317', sample_ratio: 0.01, headers: {authorization: 'Bearer s3cret-token-value'}}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if tr := cfg.Tracing; tr == nil || !*tr.Enabled || *tr.SampleRatio != 0.01 {
		t.Fatalf("tracing: %+v", cfg.Tracing)
	}
	found := false
	for _, s := range cfg.Secrets() {
		found = found || s == "Bearer s3cret-token-value"
	}
	if !found {
		t.Error("tracing.headers' values are not among the secrets")
	}
	cfg, err = Parse([]byte(minimal+"  - {name: k, kind: kafka, brokers: [b:9092], topic: 'out.{type}'}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Sinks[1].Setting("topic"); got != "out.{type}" {
		t.Errorf("Setting(topic) = %q", got)
	}
}
