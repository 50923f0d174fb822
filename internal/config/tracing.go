package config

import (
	"net/url"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Tracing configures OpenTelemetry tracing: the relay's publish spans,
// exported over OTLP (internal/tracing; docs/operations.md, "Tracing").
// Each setting left out falls back to the standard OTEL_* environment
// variable named beside it, then to the default. A nil *Tracing (no
// tracing: block) leaves everything to those variables.
type Tracing struct {
	// Enabled turns tracing on. Default false, unless
	// OTEL_TRACES_EXPORTER=otlp; OTEL_SDK_DISABLED=true or
	// OTEL_TRACES_EXPORTER=none turns it off whatever this says.
	Enabled *bool `yaml:"enabled"`
	// Endpoint is the OTLP receiver: host:port or a URL for grpc
	// (default localhost:4317), a URL for http/protobuf (default
	// http://localhost:4318, to which /v1/traces is added when the URL
	// has no path). OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
	// OTEL_EXPORTER_OTLP_ENDPOINT.
	Endpoint string `yaml:"endpoint"`
	// Protocol is grpc (default) or http/protobuf.
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL.
	Protocol string `yaml:"protocol"`
	// Insecure sends without TLS. Default: true for an http:// endpoint,
	// false otherwise. OTEL_EXPORTER_OTLP_TRACES_INSECURE,
	// OTEL_EXPORTER_OTLP_INSECURE.
	Insecure *bool `yaml:"insecure"`
	// Headers are sent with every export (an API key, an authorization):
	// secrets, never logged. OTEL_EXPORTER_OTLP_TRACES_HEADERS,
	// OTEL_EXPORTER_OTLP_HEADERS.
	Headers map[string]string `yaml:"headers"`
	// Sampler decides which messages get spans: parentbased_traceidratio
	// (default: a row's traceparent decides by its sampled flag, a row
	// without one by SampleRatio), parentbased_always_on,
	// parentbased_always_off, traceidratio (SampleRatio of the trace ids,
	// whatever the row's flag), always_on, always_off. OTEL_TRACES_SAMPLER.
	Sampler string `yaml:"sampler"`
	// SampleRatio is the share, 0 to 1, of the traces the ratio samplers
	// keep (default 1). OTEL_TRACES_SAMPLER_ARG.
	SampleRatio *float64 `yaml:"sample_ratio"`
	// ServiceName is the spans' service.name (default walpost).
	// OTEL_SERVICE_NAME.
	ServiceName string `yaml:"service_name"`
	// QueueSize bounds the spans waiting for export (default 2048): when
	// the exporter is down or slow, the spans beyond it are dropped and
	// counted (walpost_tracing_spans_dropped_total), and no message waits.
	// OTEL_BSP_MAX_QUEUE_SIZE.
	QueueSize int `yaml:"queue_size"`
}

// TracingSamplers are the values of tracing.sampler.
var TracingSamplers = []string{"parentbased_traceidratio", "parentbased_always_on", "parentbased_always_off",
	"traceidratio", "always_on", "always_off"}

// validateTracing checks the tracing: block, fields in struct order.
func (c *Config) validateTracing() error {
	t := c.Tracing
	if t == nil {
		return nil
	}
	const at = "tracing."
	if t.Endpoint != "" && strings.Contains(t.Endpoint, "://") {
		u, err := url.Parse(t.Endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return c.fail(at+"endpoint", "%s is not a URL such as http://collector:4318 (or host:port for grpc)", c.q(at+"endpoint", t.Endpoint))
		}
	}
	switch t.Protocol {
	case "", "grpc", "http/protobuf":
	default:
		return c.fail(at+"protocol", "%s is not grpc or http/protobuf", c.q(at+"protocol", t.Protocol))
	}
	if t.Protocol == "http/protobuf" && t.Endpoint != "" && !strings.Contains(t.Endpoint, "://") {
		return c.fail(at+"endpoint", "%s: http/protobuf needs a URL, such as http://%s", c.q(at+"endpoint", t.Endpoint), t.Endpoint)
	}
	if t.Sampler != "" {
		ok := false
		for _, s := range TracingSamplers {
			ok = ok || s == t.Sampler
		}
		if !ok {
			return c.fail(at+"sampler", "%s is not one of %s", c.q(at+"sampler", t.Sampler), strings.Join(TracingSamplers, ", "))
		}
	}
	if r := t.SampleRatio; r != nil && (*r < 0 || *r > 1) {
		return c.fail(at+"sample_ratio", "%v is outside 0..1 (0.01 keeps one trace in a hundred)", *r)
	}
	if t.QueueSize < 0 || t.QueueSize > 1_000_000 {
		return c.fail(at+"queue_size", "%d is outside 1..1000000 (0: the default, 2048)", t.QueueSize)
	}
	return nil
}

// Setting returns the scalar value of the sink's kind-specific setting
// key (variables expanded), "" when it is not set: what tracing names the
// sink's destination by (internal/tracing).
func (s *Sink) Setting(key string) string {
	if s.node == nil || s.node.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(s.node.Content); i += 2 {
		if k, v := s.node.Content[i], s.node.Content[i+1]; k.Value == key && v.Kind == yaml.ScalarNode {
			return v.Value
		}
	}
	return ""
}
