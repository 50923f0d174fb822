package tracing

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/walpost/walpost/internal/config"
)

// Settings are the tracing settings in effect: the tracing: block, the
// OTEL_* variables for what it leaves out, and the defaults.
type Settings struct {
	Enabled     bool
	Protocol    string // grpc or http/protobuf
	Endpoint    string // "": the exporter's own (OTEL_EXPORTER_OTLP_*, localhost)
	Insecure    *bool
	Headers     map[string]string
	Sampler     string
	SampleRatio float64
	ServiceName string
	QueueSize   int
}

// Resolve returns the settings of c (nil: no tracing: block) with getenv
// (os.Getenv) for the OTEL_* variables; an error names the bad variable.
func Resolve(c *config.Tracing, getenv func(string) string) (Settings, error) {
	if c == nil {
		c = &config.Tracing{}
	}
	env := func(keys ...string) string {
		for _, k := range keys {
			if v := strings.TrimSpace(getenv(k)); v != "" {
				return v
			}
		}
		return ""
	}
	s := Settings{Protocol: c.Protocol, Endpoint: c.Endpoint, Insecure: c.Insecure, Headers: c.Headers,
		Sampler: c.Sampler, ServiceName: c.ServiceName, QueueSize: c.QueueSize, SampleRatio: 1}
	exporter := strings.ToLower(env("OTEL_TRACES_EXPORTER"))
	switch {
	case c.Enabled != nil:
		s.Enabled = *c.Enabled
	default:
		s.Enabled = exporter == "otlp"
	}
	if exporter == "none" || strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") {
		s.Enabled = false
	}
	if s.Protocol == "" {
		s.Protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch s.Protocol {
	case "", "grpc":
		s.Protocol = "grpc"
	case "http/protobuf":
	default:
		return s, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: %q is not grpc or http/protobuf (http/json is not supported)", s.Protocol)
	}
	if s.Sampler == "" {
		s.Sampler = env("OTEL_TRACES_SAMPLER")
		switch s.Sampler {
		case "":
			s.Sampler = "parentbased_traceidratio"
		case "parentbased_traceidratio", "parentbased_always_on", "parentbased_always_off", "traceidratio", "always_on", "always_off":
		default:
			return s, fmt.Errorf("OTEL_TRACES_SAMPLER: %q is not one of %s", s.Sampler, strings.Join(config.TracingSamplers, ", "))
		}
	}
	if c.SampleRatio != nil {
		s.SampleRatio = *c.SampleRatio
	} else if v := env("OTEL_TRACES_SAMPLER_ARG"); v != "" && strings.HasSuffix(s.Sampler, "traceidratio") {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 || r > 1 {
			return s, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG: %q is not a ratio from 0 to 1", v)
		}
		s.SampleRatio = r
	}
	if s.ServiceName == "" {
		s.ServiceName = env("OTEL_SERVICE_NAME")
		if s.ServiceName == "" {
			s.ServiceName = "walpost"
		}
	}
	if s.QueueSize == 0 {
		s.QueueSize = 2048
		if v := env("OTEL_BSP_MAX_QUEUE_SIZE"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return s, fmt.Errorf("OTEL_BSP_MAX_QUEUE_SIZE: %q is not a positive number", v)
			}
			s.QueueSize = n
		}
	}
	return s, nil
}

// Provider holds the SDK's tracer provider and the export queue of one
// process. A nil *Provider is tracing off: its methods do nothing and
// Sink returns nil. Safe for concurrent use.
type Provider struct {
	tp      *sdktrace.TracerProvider
	metrics *Metrics
	tracer  trace.Tracer
	sampler Sampler
	s       Settings
	source  string // walpost.source of the spans; "" outside a fleet (WithSource)
}

// New returns the provider of s, or nil when tracing is off. It does no
// I/O: the exporter connects when it first exports, and an exporter that
// cannot be reached costs spans (counted), never messages. reg receives
// the tracing counters.
func New(ctx context.Context, s Settings, version string, reg prometheus.Registerer, log zerolog.Logger) (*Provider, error) {
	if !s.Enabled {
		return nil, nil
	}
	exp, err := newExporter(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", s.ServiceName), attribute.String("service.version", version)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	if fromEnv, err := resource.New(ctx, resource.WithFromEnv()); err == nil { // OTEL_RESOURCE_ATTRIBUTES
		if r, err := resource.Merge(res, fromEnv); err == nil {
			res = r
		}
	}
	// The SDK's own errors (an exporter's, a bad attribute) go to the log,
	// not to stderr's plain text beside the JSON records; export failures
	// are counted and warned about by the queue.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Debug().Err(err).Msg("tracing: OpenTelemetry SDK error")
	}))
	m := NewMetrics(reg)
	q := NewQueue(exp, s.QueueSize, m, log)
	// The sampling is Sampler's, decided before a span is started; the
	// SDK records every span it is given.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(q), sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.AlwaysSample()))
	p := &Provider{tp: tp, metrics: m, tracer: tp.Tracer("github.com/walpost/walpost/relay", trace.WithInstrumentationVersion(version)),
		sampler: NewSampler(s.Sampler, s.SampleRatio), s: s}
	log.Info().Str("protocol", s.Protocol).Str("endpoint", p.endpoint()).Str("sampler", s.Sampler).Float64("sample_ratio", s.SampleRatio).
		Int("queue_size", s.QueueSize).Msg("tracing: publish spans exported over OTLP")
	return p, nil
}

// WithSource returns a provider whose publish spans name the source
// (walpost.source): the one a fleet's source's relay records with
// (internal/fleet). It shares p's exporter and queue; stopping either
// stops both. Nil when p is nil (tracing off).
func (p *Provider) WithSource(name string) *Provider {
	if p == nil {
		return nil
	}
	q := *p
	q.source = name
	return &q
}

// endpoint describes where spans go, without credentials.
func (p *Provider) endpoint() string {
	if p.s.Endpoint == "" {
		return "OTEL_EXPORTER_OTLP_* or the default"
	}
	if u, err := url.Parse(p.s.Endpoint); err == nil && u.Host != "" {
		return u.Scheme + "://" + u.Host + u.Path
	}
	return p.s.Endpoint
}

// newExporter returns the OTLP exporter of s. What s leaves empty the
// exporter takes from the OTEL_EXPORTER_OTLP_* variables itself.
func newExporter(ctx context.Context, s Settings) (sdktrace.SpanExporter, error) {
	scheme := ""
	if i := strings.Index(s.Endpoint, "://"); i > 0 {
		scheme = s.Endpoint[:i]
	}
	if s.Protocol == "http/protobuf" {
		var opts []otlptracehttp.Option
		if s.Endpoint != "" {
			u, err := url.Parse(s.Endpoint)
			if err != nil {
				return nil, fmt.Errorf("tracing.endpoint: %w", err)
			}
			if u.Path == "" || u.Path == "/" {
				u.Path = "/v1/traces"
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
		}
		if s.Insecure != nil && *s.Insecure && scheme != "http" {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		if len(s.Headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(s.Headers))
		}
		return otlptracehttp.New(ctx, opts...)
	}
	var opts []otlptracegrpc.Option
	switch {
	case scheme != "":
		opts = append(opts, otlptracegrpc.WithEndpointURL(s.Endpoint))
	case s.Endpoint != "":
		opts = append(opts, otlptracegrpc.WithEndpoint(s.Endpoint))
	}
	if s.Insecure != nil && *s.Insecure && scheme != "http" {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	if len(s.Headers) > 0 {
		opts = append(opts, otlptracegrpc.WithHeaders(s.Headers))
	}
	return otlptracegrpc.New(ctx, opts...)
}

// Shutdown exports the spans still queued, within timeout, and stops.
func (p *Provider) Shutdown(timeout time.Duration) {
	if p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_ = p.tp.Shutdown(ctx)
}

// ForceFlush exports what is queued now (tests, and before a command
// exits).
func (p *Provider) ForceFlush(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.ForceFlush(ctx)
}

// Mode says which command publishes: its spans say so.
type Mode int

const (
	// Relay is cdc run: spans start at the commit.
	Relay Mode = iota
	// Replay is cdc replay: a message sent again from the outbox table.
	Replay
	// Resend is cdc dead-letter resend (and the console's resend): a
	// parked message published again.
	Resend
)

type providerKey struct{}

// WithProvider returns ctx carrying p, for the commands that publish
// outside the relay's runners (cdc dead-letter resend: FromContext).
func WithProvider(ctx context.Context, p *Provider) context.Context {
	if p == nil {
		return ctx
	}
	return context.WithValue(ctx, providerKey{}, p)
}

// FromContext returns the provider WithProvider put in ctx, nil (tracing
// off) when none.
func FromContext(ctx context.Context) *Provider {
	p, _ := ctx.Value(providerKey{}).(*Provider)
	return p
}
