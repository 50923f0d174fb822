package fleet

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/admin"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/relaytest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// stateOf returns a source's state in f's report.
func stateOf(f *Fleet, name string) string {
	for _, s := range f.Report().Sources {
		if s.Name == name {
			return s.State
		}
	}
	return ""
}

// A source whose relay stops with an error (here its slot is missing:
// cdc init was not run) is failed, counted and started again after the
// backoff, while the other streams; once its slot exists, the next start
// streams. Readiness: 503 while every source failed, 200 once one
// streams; a failure alone does not make the instance unready.
func TestIntegrationAFailedSourceIsStartedAgainAndTheOthersGoOn(t *testing.T) {
	url := pgtest.URL(t)
	dir := t.TempDir()
	for _, name := range []string{"good", "late"} {
		ob := relaytest.NewOutbox(t, url)
		out := filepath.Join(t.TempDir(), name+".jsonl")
		b, err := os.ReadFile(ob.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", out), ""))
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, name+".yaml"), string(b))
	}
	srcs, err := Load([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	// Sorted by file name; cdc init of good only.
	good, late := srcs[0], srcs[1]
	if err := admin.Setup(t.Context(), good.Config, func(string) {}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	var log syncBuffer
	f, err := New(srcs, Options{Log: zerolog.New(&log), Registry: reg, FailureBackoff: 300 * time.Millisecond, MaxFailureBackoff: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan error, 1)
	go func() { ran <- f.Run(ctx) }()
	pgtest.Await(t, 30*time.Second, "good streaming, late failed", func() bool {
		return stateOf(f, good.Name) == StateStreaming && stateOf(f, late.Name) == StateFailed
	})
	if !f.Ready() {
		t.Errorf("not ready with one source streaming and one failed: %+v", f.Report())
	}
	rec := httptest.NewRecorder()
	f.ServeReadyz(rec, httptest.NewRequest("GET", "/readyz?verbose", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "\n"+late.Name+" failed\n") {
		t.Errorf("/readyz?verbose: %d %q", rec.Code, rec.Body.String())
	}
	failed := testutil.ToFloat64(sourceMetric(t, reg, "walpost_source_failed", late.Name))
	pgtest.Await(t, 30*time.Second, "two failures of late (started again)", func() bool {
		return testutil.ToFloat64(sourceMetric(t, reg, "walpost_source_failures_total", late.Name)) >= 2
	})
	if failed != 1 || !strings.Contains(log.String(), `"source":"`+late.Name+`"`) || !strings.Contains(log.String(), "source failed") {
		t.Errorf("walpost_source_failed %v; log:\n%s", failed, log.String())
	}
	if err := admin.Setup(t.Context(), late.Config, func(string) {}); err != nil {
		t.Fatal(err)
	}
	pgtest.Await(t, 30*time.Second, "late streaming after its slot was made", func() bool { return stateOf(f, late.Name) == StateStreaming })
	if v := testutil.ToFloat64(sourceMetric(t, reg, "walpost_source_failed", late.Name)); v != 0 {
		t.Errorf("walpost_source_failed %v after the source streams again", v)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st := stateOf(f, late.Name); st != StateStopped || f.Ready() {
		t.Errorf("after the stop: state %s, ready %v", st, f.Ready())
	}
}

// sourceMetric finds a source's series of a gauge or counter in reg.
func sourceMetric(t *testing.T, reg *prometheus.Registry, name, source string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "source" && l.GetValue() == source {
					v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
					g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
					g.Set(v)
					return g
				}
			}
		}
	}
	t.Fatalf("no %s{source=%q}", name, source)
	return nil
}

// The readiness rule, by the sources' states.
func TestReadinessOfSeveralSources(t *testing.T) {
	f := &Fleet{opt: Options{StartGrace: time.Hour}}
	st := func(state string, reached bool) Status { return Status{State: state, reached: reached} }
	if ok, why := f.readiness([]Status{st(StateStreaming, true)}); ok || why != "not started" {
		t.Errorf("before Run: %v %q", ok, why)
	}
	f.started.Store(time.Now().UnixNano())
	for _, tc := range []struct {
		sources []Status
		ready   bool
		why     string
	}{
		{[]Status{st(StateStreaming, true), st(StateStandby, true), st(StateWaitingForCapacity, true)}, true, "ok: 1 streaming, 1 standby, 1 waiting_for_capacity"},
		{[]Status{st(StateStandby, true), st(StateFailed, true)}, true, "ok: 1 standby, 1 failed"},
		{[]Status{st(StateFailed, true), st(StateFailed, true)}, false, "every source failed (2)"},
		{[]Status{st(StateStreaming, true), st(StateConnecting, false)}, false, "starting: 1 of 2 sources not yet at their slot"},
		{[]Status{st(StateStreaming, true), st(StateConnecting, true)}, true, "ok: 1 streaming, 1 connecting"},
	} {
		if ok, why := f.readiness(tc.sources); ok != tc.ready || why != tc.why {
			t.Errorf("%+v: %v %q, want %v %q", tc.sources, ok, why, tc.ready, tc.why)
		}
	}
	f.started.Store(time.Now().Add(-2 * time.Hour).UnixNano()) // past the grace
	if ok, _ := f.readiness([]Status{st(StateConnecting, false)}); !ok {
		t.Error("a source still connecting after the grace keeps the instance unready")
	}
	f.stopping.Store(true)
	if ok, why := f.readiness([]Status{st(StateStreaming, true)}); ok || why != "stopping" {
		t.Errorf("stopping: %v %q", ok, why)
	}
}
