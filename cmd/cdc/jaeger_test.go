package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
)

// jaegerVersion is the Jaeger tools/jaeger pins (its go.mod): the tracing
// tests read their traces back from its query API.
const jaegerVersion = "v1.75.0"

var (
	jaegerOnce sync.Once
	jaegerPath string
	jaegerErr  error
)

// jaegerBin returns Jaeger's all-in-one binary, built once from the
// tools/jaeger module into /var/tmp/walpost-jaeger/<version>/jaeger (a
// large build: minutes on a loaded machine), or skips the test saying
// why it cannot be had. A file lock keeps two test processes from
// building it at once.
func jaegerBin(t *testing.T) string {
	t.Helper()
	jaegerOnce.Do(func() {
		// A cold build takes many minutes on a loaded machine: it gets at
		// most 15, and never the last 3 of the test binary's -timeout.
		limit := 15 * time.Minute
		if d, ok := t.Deadline(); ok {
			limit = min(limit, time.Until(d)-3*time.Minute)
		}
		jaegerPath, jaegerErr = buildJaeger(limit)
	})
	if jaegerErr != nil {
		t.Skipf("no Jaeger to read traces from: %v", jaegerErr)
	}
	return jaegerPath
}

func buildJaeger(limit time.Duration) (string, error) {
	dir := filepath.Join(os.TempDir(), "walpost-jaeger", jaegerVersion)
	if d := os.Getenv("WALPOST_JAEGER_CACHE"); d != "" {
		dir = filepath.Join(d, jaegerVersion)
	} else if _, err := os.Stat("/var/tmp"); err == nil {
		dir = filepath.Join("/var/tmp/walpost-jaeger", jaegerVersion)
	}
	bin := filepath.Join(dir, "jaeger")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // built by another process meanwhile
	}
	mod, err := filepath.Abs("../../tools/jaeger")
	if err != nil {
		return "", err
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go command to build Jaeger with: %w", err)
	}
	if limit <= 0 {
		return "", fmt.Errorf("no time left in the test binary's -timeout to build it; build it once: cd tools/jaeger && go build -o %s github.com/jaegertracing/jaeger/cmd/jaeger", bin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, gobin, "build", "-o", bin+".tmp", "github.com/jaegertracing/jaeger/cmd/jaeger")
	cmd.Dir = mod
	if out, err := cmd.CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("building github.com/jaegertracing/jaeger/cmd/jaeger@%s in tools/jaeger took more than %v; build it once: cd tools/jaeger && go build -o %s github.com/jaegertracing/jaeger/cmd/jaeger", jaegerVersion, limit.Round(time.Second), bin)
		}
		return "", fmt.Errorf("building github.com/jaegertracing/jaeger/cmd/jaeger@%s in tools/jaeger: %v\n%s", jaegerVersion, err, out)
	}
	return bin, os.Rename(bin+".tmp", bin)
}

// jaeger is a running Jaeger with in-memory storage.
type jaeger struct {
	otlpGRPC, otlpHTTP string // host:port
	query              string // http://host:port
}

// freeAddr returns a loopback address no one listens on (for a moment).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startJaeger starts Jaeger (its OTLP receivers and query API on free
// loopback ports, traces in memory, nothing else listening) for the test,
// stopped at its end.
func startJaeger(t *testing.T) jaeger {
	t.Helper()
	bin := jaegerBin(t)
	j := jaeger{otlpGRPC: freeAddr(t), otlpHTTP: freeAddr(t), query: "http://" + freeAddr(t)}
	conf := fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: %s
    grpc:
      endpoint: %s
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`, strings.TrimPrefix(j.query, "http://"), freeAddr(t), j.otlpGRPC, j.otlpHTTP)
	path := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", path)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	up := func() bool {
		select {
		case <-done:
			return true
		default:
		}
		resp, err := http.Get(j.query + "/api/services")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	if !pgtest.WaitFor(60*time.Second, up) {
		t.Fatalf("Jaeger did not answer on %s within 60s:\n%s", j.query, out.String())
	}
	select {
	case <-done:
		t.Fatalf("Jaeger exited:\n%s", out.String())
	default:
	}
	return j
}

// jSpan is a span as Jaeger's query API returns it (/api/traces/{id}).
type jSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64  `json:"startTime"` // µs since the epoch
	Duration  int64  `json:"duration"`  // µs
	Tags      []jTag `json:"tags"`
	Logs      []struct {
		Timestamp int64  `json:"timestamp"`
		Fields    []jTag `json:"fields"`
	} `json:"logs"`
	ProcessID string `json:"processID"`
}

type jTag struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

type jTrace struct {
	TraceID   string  `json:"traceID"`
	Spans     []jSpan `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

// tag returns the value of s's tag key as text, "" when it has none.
func (s jSpan) tag(key string) string {
	for _, g := range s.Tags {
		if g.Key == key {
			return fmt.Sprint(g.Value)
		}
	}
	return ""
}

// events returns the names of s's events (Jaeger's logs), in order.
func (s jSpan) events() []string {
	var out []string
	for _, l := range s.Logs {
		for _, f := range l.Fields {
			if f.Key == "event" {
				out = append(out, fmt.Sprint(f.Value))
			}
		}
	}
	return out
}

// parent returns the span id s is a CHILD_OF, "" for a root.
func (s jSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// get reads one trace back, nil when Jaeger does not have it (yet).
func (j jaeger) get(t *testing.T, traceID string) *jTrace {
	t.Helper()
	resp, err := http.Get(j.query + "/api/traces/" + traceID)
	if err != nil {
		t.Fatalf("reading trace %s from Jaeger: %v", traceID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	var body struct {
		Data []jTrace `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("trace %s from Jaeger: %v", traceID, err)
	}
	if len(body.Data) == 0 {
		return nil
	}
	return &body.Data[0]
}

// search returns the traces of service whose spans have the tag key=value.
func (j jaeger) search(t *testing.T, service, key, value string) []jTrace {
	t.Helper()
	tags, _ := json.Marshal(map[string]string{key: value})
	q := url.Values{"service": {service}, "lookback": {"1h"}, "limit": {"20"}, "tags": {string(tags)}}
	resp, err := http.Get(j.query + "/api/traces?" + q.Encode())
	if err != nil {
		t.Fatalf("searching Jaeger: %v", err)
	}
	defer resp.Body.Close()
	var body struct {
		Data []jTrace `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("searching Jaeger: %v", err)
	}
	return body.Data
}

// waitTrace polls until Jaeger has trace traceID and ok accepts it, and
// returns it; it fails the test after a minute with the last one seen.
func (j jaeger) waitTrace(t *testing.T, traceID string, ok func(*jTrace) bool) *jTrace {
	t.Helper()
	var tr *jTrace
	if !pgtest.WaitFor(60*time.Second, func() bool { tr = j.get(t, traceID); return tr != nil && ok(tr) }) {
		b, _ := json.MarshalIndent(tr, "", "  ")
		t.Fatalf("Jaeger does not have trace %s as expected within 60s; it has:\n%s", traceID, b)
	}
	return tr
}

// span returns the spans of tr named op.
func (tr *jTrace) named(op string) []jSpan {
	var out []jSpan
	for _, s := range tr.Spans {
		if s.OperationName == op {
			out = append(out, s)
		}
	}
	return out
}

// service is the service name of s in tr.
func (tr *jTrace) service(s jSpan) string { return tr.Processes[s.ProcessID].ServiceName }
