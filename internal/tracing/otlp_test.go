package tracing

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/walpost/walpost/internal/publish"
)

// otlpReceiver keeps the spans an OTLP exporter sent it.
type otlpReceiver struct {
	coltrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
	svc   []string
}

func (r *otlpReceiver) take(req *coltrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, a := range rs.Resource.GetAttributes() {
			if a.Key == "service.name" {
				r.svc = append(r.svc, a.Value.GetStringValue())
			}
		}
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
}

func (r *otlpReceiver) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	r.take(req)
	return &coltrace.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) got() ([]*tracepb.Span, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...), append([]string(nil), r.svc...)
}

// TestProviderExportsOverOTLPGRPCAndHTTP: a span recorded through New's
// provider reaches an OTLP receiver over gRPC and over HTTP, as the child
// of the row's traceparent, starting at the commit, with walpost's
// service name, and is counted exported.
func TestProviderExportsOverOTLPGRPCAndHTTP(t *testing.T) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(protocol, func(t *testing.T) {
			recv := &otlpReceiver{}
			var endpoint string
			if protocol == "grpc" {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				srv := grpc.NewServer()
				coltrace.RegisterTraceServiceServer(srv, recv)
				go srv.Serve(l)
				defer srv.Stop()
				endpoint = "http://" + l.Addr().String()
			} else {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
					b, _ := io.ReadAll(req.Body)
					var m coltrace.ExportTraceServiceRequest
					if req.URL.Path != "/v1/traces" || proto.Unmarshal(b, &m) != nil {
						http.Error(w, "bad request", http.StatusBadRequest)
						return
					}
					recv.take(&m)
					w.Header().Set("Content-Type", "application/x-protobuf")
				}))
				defer srv.Close()
				endpoint = srv.URL
			}
			reg := prometheus.NewRegistry()
			p, err := New(context.Background(), Settings{Enabled: true, Protocol: protocol, Endpoint: endpoint, Sampler: "parentbased_traceidratio",
				SampleRatio: 1, ServiceName: "walpost", QueueSize: 16}, "test", reg, zerolog.Nop())
			if err != nil || p == nil {
				t.Fatalf("New: %v, %v", p, err)
			}
			m := msgWith(sampledTP, "0190a7c2-0000-7000-8000-000000000001")
			tr := p.Sink(sinkConfig(t, "{name: n, kind: nats, subject: orders.new}"), Relay)
			d := []publish.Delivery{{Msg: m}}
			tr.Batch(d)
			tr.Acked(d)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := p.ForceFlush(ctx); err != nil {
				t.Fatal(err)
			}
			p.Shutdown(5 * time.Second)
			spans, svc := recv.got()
			if len(spans) != 1 || len(svc) != 1 || svc[0] != "walpost" {
				t.Fatalf("the receiver got %d spans of services %v, want 1 of walpost", len(spans), svc)
			}
			s := spans[0]
			if s.Name != "publish orders.new" || hex.EncodeToString(s.TraceId) != "4bf92f3577b34da6a3ce929d0e0e4736" ||
				hex.EncodeToString(s.ParentSpanId) != "00f067aa0ba902b7" || s.StartTimeUnixNano != uint64(m.CommitTime.UnixNano()) ||
				s.Kind != tracepb.Span_SPAN_KIND_PRODUCER {
				t.Fatalf("span %s trace %x parent %x start %d (commit %d) kind %v", s.Name, s.TraceId, s.ParentSpanId, s.StartTimeUnixNano, m.CommitTime.UnixNano(), s.Kind)
			}
			if n := testutil.ToFloat64(p.metricsForTest().exported); n != 1 {
				t.Fatalf("walpost_tracing_spans_exported_total = %v, want 1", n)
			}
		})
	}
}
