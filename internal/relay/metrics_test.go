package relay

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/checkpoint"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/replication"
)

// TestMetricsEverySinkSeriesExistsAtZero: once New has the config, every
// per-sink series exists for every configured sink at 0, before anything
// ran; the latency histogram has its ~15 buckets; walpost_build_info is 1
// with the labels passed in.
func TestMetricsEverySinkSeriesExistsAtZero(t *testing.T) {
	cfg, err := config.Parse([]byte("postgres: {url: 'postgres://127.0.0.1:9/none'}\nsinks: [{name: a, kind: discard}, {name: b, kind: discard}]\n"),
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	if _, err := New(cfg, zerolog.Nop(), m); err != nil {
		t.Fatal(err)
	}
	RegisterBuildInfo(reg, "v1.2.3", "abc+dirty")
	want := fmt.Sprintf(`
# HELP walpost_build_info Always 1; the labels name the relay's version, VCS revision and Go version.
# TYPE walpost_build_info gauge
walpost_build_info{goversion=%q,revision="abc+dirty",version="v1.2.3"} 1
# HELP walpost_messages_published_total Messages a sink acknowledged (retried batches count once).
# TYPE walpost_messages_published_total counter
walpost_messages_published_total{sink="a"} 0
walpost_messages_published_total{sink="b"} 0
# HELP walpost_refused_total Messages a sink refused for good (too large, ...) that were parked in the dead-letter table (relay.on_refused: dead_letter).
# TYPE walpost_refused_total counter
walpost_refused_total{sink="a"} 0
walpost_refused_total{sink="b"} 0
# HELP walpost_sink_failing 1 while a sink is retrying a batch it failed to publish.
# TYPE walpost_sink_failing gauge
walpost_sink_failing{sink="a"} 0
walpost_sink_failing{sink="b"} 0
`, runtime.Version())
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "walpost_build_info", "walpost_messages_published_total",
		"walpost_refused_total", "walpost_sink_failing"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.latency); n != 2 {
		t.Errorf("%d latency series, want one per sink (2)", n)
	}
	if n := len(latencyBuckets); n < 12 || n > 20 {
		t.Errorf("%d latency buckets, want about 15", n)
	}
}

// TestOldestInFlightAgeIsMeasuredAtScrapeTime: the oldest in-flight
// transaction's age counts from the first scrape that saw it oldest,
// holds while later transactions come and go, moves to the next one when
// it is acknowledged, and is 0 with nothing in flight or once the cycle
// ended (an instance that lost the slot).
func TestOldestInFlightAgeIsMeasuredAtScrapeTime(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	m := NewMetrics(nil)
	m.now = func() time.Time { return clock }
	tr := checkpoint.New(10)
	m.watch(tr, nil, nil)
	scrape := func(want time.Duration) {
		t.Helper()
		if got := m.oldestInFlight(); got != want.Seconds() {
			t.Fatalf("walpost_oldest_inflight_seconds = %v, want %v", got, want.Seconds())
		}
	}
	scrape(0)
	a := tr.Begin()
	tr.Add(a, 1)
	tr.Commit(a, 100)
	scrape(0) // first seen now
	clock = clock.Add(30 * time.Second)
	b := tr.Begin()
	tr.Add(b, 1)
	tr.Commit(b, 200)
	scrape(30 * time.Second)
	clock = clock.Add(15 * time.Second)
	tr.AckAll([]*checkpoint.Txn{a})
	scrape(0) // b is the oldest now, first seen at this scrape
	clock = clock.Add(5 * time.Second)
	scrape(5 * time.Second)
	m.cycleEnded()
	scrape(0)
	m.watch(tr, nil, nil)
	tr.AckAll([]*checkpoint.Txn{b})
	clock = clock.Add(time.Minute)
	scrape(0)
}

// TestSlotStalledCountsOnlyWhileTheWALIsAhead: the stall counts from the
// first observation of an unmoving confirmed position behind the
// server's WAL, restarts when the position moves, and is 0 when caught
// up.
func TestSlotStalledCountsOnlyWhileTheWALIsAhead(t *testing.T) {
	var s stallClock
	t0 := time.Unix(1_700_000_000, 0)
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	for i, c := range []struct {
		sec            int
		confirmed, wal pglogrepl.LSN
		want           time.Duration
	}{
		{0, 100, 100, 0},  // caught up
		{10, 100, 100, 0}, // idle: caught up still
		{20, 100, 300, 0}, // WAL ahead: counts from here
		{50, 100, 400, 30 * time.Second},
		{60, 250, 400, 0}, // moved
		{90, 250, 500, 30 * time.Second},
		{95, 500, 500, 0},  // caught up
		{100, 500, 600, 0}, // ahead again: counts anew
		{400, 500, 600, 300 * time.Second},
	} {
		if got := s.observe(at(c.sec), c.confirmed, c.wal); got != c.want {
			t.Errorf("%d: at %ds confirmed %d, WAL %d: stalled %v, want %v", i, c.sec, c.confirmed, c.wal, got, c.want)
		}
	}
}

// TestMetricsLagOfALostSlotIsTheServersNotZero: before the stream has a
// keepalive, and for a slot the server invalidated, walpost_lag_bytes is
// the slot's lag as read from the server (pg_current_wal_lsn() minus
// confirmed_flush_lsn), not 0, and walpost_slot_lost is 1.
func TestMetricsLagOfALostSlotIsTheServersNotZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	want := func(lag, lost int) string {
		return fmt.Sprintf(`
# HELP walpost_lag_bytes Server WAL end (last keepalive) minus the confirmed LSN; until the stream has a keepalive, pg_current_wal_lsn() minus the slot's confirmed_flush_lsn as last read.
# TYPE walpost_lag_bytes gauge
walpost_lag_bytes %d
# HELP walpost_slot_lost 1 when the relay last found its slot invalidated by the server (wal_status lost): it stops; run cdc recover.
# TYPE walpost_slot_lost gauge
walpost_slot_lost %d
`, lag, lost)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want(0, 0)), "walpost_lag_bytes", "walpost_slot_lost"); err != nil {
		t.Error(err)
	}
	m.slotRead(replication.SlotInfo{Exists: true, WALStatus: "reserved", LagBytes: 4096})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want(4096, 0)), "walpost_lag_bytes", "walpost_slot_lost"); err != nil {
		t.Error(err)
	}
	m.slotRead(replication.SlotInfo{Exists: true, WALStatus: "lost", LagBytes: 70 << 20})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want(70<<20, 1)), "walpost_lag_bytes", "walpost_slot_lost"); err != nil {
		t.Error(err)
	}
}

// TestMetricsOfReadsOneSourcesSeries: MetricsOf reads the series of the
// source named (a fleet labels each with its source), and every series
// when no source is named (one relay in the process).
func TestMetricsOfReadsOneSourcesSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	published := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walpost_messages_published_total"}, []string{"source", "sink"})
	stalled := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "walpost_slot_stalled_seconds"}, []string{"source"})
	reg.MustRegister(published, stalled)
	published.WithLabelValues("a", "out").Add(3)
	published.WithLabelValues("b", "out").Add(5)
	stalled.WithLabelValues("b").Set(7)
	if m := MetricsOf(reg, "a"); m.Published["out"] != 3 || m.Stalled != 0 {
		t.Errorf("source a: %+v, want 3 published to out, not stalled", m)
	}
	if m := MetricsOf(reg, "b"); m.Published["out"] != 5 || m.Stalled != 7 {
		t.Errorf("source b: %+v, want 5 published to out, stalled 7s", m)
	}
	if m := MetricsOf(nil, ""); len(m.Published) != 0 {
		t.Errorf("no gatherer: %+v, want nothing", m)
	}
}
