package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/config"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestHistQuantileInterpolatesInsideTheBucket(t *testing.T) {
	h := &Hist{Bounds: []float64{1, 2, 4, math.Inf(1)}, Counts: []float64{10, 30, 60, 0}}
	for _, c := range []struct{ q, want float64 }{
		{0.05, 0.5},           // rank 5 of the 10 in [0,1]
		{0.10, 1},             // the first bucket's top
		{0.25, 1.5},           // rank 25: 15 of the 30 in (1,2]
		{0.70, 3},             // rank 70: 30 of the 60 in (2,4]
		{0.99, 2 + 2*59.0/60}, // rank 99: 59 of the 60 in (2,4]
		{1, 4},
	} {
		if got := h.Quantile(c.q); !near(got, c.want) {
			t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := h.MaxBucket(); got != 4 {
		t.Errorf("MaxBucket = %v, want 4", got)
	}
}

func TestHistQuantileInOverflowBucketIsLastFiniteBound(t *testing.T) {
	h := &Hist{Bounds: []float64{1, 2, math.Inf(1)}, Counts: []float64{1, 0, 9}}
	if got := h.Quantile(0.99); got != 2 {
		t.Errorf("Quantile(0.99) = %v, want 2", got)
	}
	if got := h.MaxBucket(); !math.IsInf(got, 1) {
		t.Errorf("MaxBucket = %v, want +Inf", got)
	}
	if !math.IsNaN(NewHist().Quantile(0.5)) {
		t.Error("empty histogram: want NaN")
	}
}

func TestHistObserveUsesLessOrEqualBuckets(t *testing.T) {
	h := NewHist()
	h.Observe(0.0001) // exactly the first bound: first bucket
	h.Observe(0.00011)
	h.Observe(1e9)
	if h.Counts[0] != 1 || h.Counts[1] != 1 || h.Counts[len(h.Counts)-1] != 1 {
		t.Fatalf("counts: first %v, second %v, +Inf %v", h.Counts[0], h.Counts[1], h.Counts[len(h.Counts)-1])
	}
	if len(h.Bounds) != 65 || !near(h.Bounds[1], 0.000125) || !near(h.Bounds[63], 0.0001*math.Pow(1.25, 63)) {
		t.Fatalf("bounds: %d, %v, %v", len(h.Bounds), h.Bounds[1], h.Bounds[63])
	}
}

// exposition renders cumulative buckets as client_golang does.
func exposition(sink string, bounds []float64, cum []float64) string {
	var b strings.Builder
	b.WriteString("# HELP walpost_end_to_end_latency_seconds x\n# TYPE walpost_end_to_end_latency_seconds histogram\n")
	for i, le := range bounds {
		l := "+Inf"
		if !math.IsInf(le, 1) {
			l = strings.TrimRight(strings.TrimRight(jsonNum(le), "0"), ".")
		}
		b.WriteString(`walpost_end_to_end_latency_seconds_bucket{sink="` + sink + `",le="` + l + `"} ` + jsonNum(cum[i]) + "\n")
	}
	b.WriteString(`walpost_end_to_end_latency_seconds_sum{sink="` + sink + `"} 1.5` + "\n")
	b.WriteString(`walpost_end_to_end_latency_seconds_count{sink="` + sink + `"} ` + jsonNum(cum[len(cum)-1]) + "\n")
	b.WriteString(`walpost_messages_published_total{sink="` + sink + `"} ` + jsonNum(cum[len(cum)-1]) + "\n")
	return b.String()
}

func jsonNum(v float64) string { b, _ := json.Marshal(v); return string(b) }

func TestPromHistogramDeltaPercentiles(t *testing.T) {
	bounds := []float64{0.001, 0.002, 0.004, math.Inf(1)}
	other := exposition("other", bounds, []float64{500, 500, 500, 500})
	before := exposition("discard", bounds, []float64{10, 20, 20, 20}) + other
	// 100 more observations: 0 in (0,1ms], 50 in (1,2ms], 49 in (2,4ms], 1 above.
	after := exposition("discard", bounds, []float64{10, 70, 119, 120}) + other

	h0, err := ParsePromHistogram(strings.NewReader(before), "walpost_end_to_end_latency_seconds", "sink", "discard")
	if err != nil {
		t.Fatal(err)
	}
	h1, err := ParsePromHistogram(strings.NewReader(after), "walpost_end_to_end_latency_seconds", "sink", "discard")
	if err != nil {
		t.Fatal(err)
	}
	d, err := h1.Sub(h0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Counts, []float64{0, 50, 49, 1}) {
		t.Fatalf("delta counts %v", d.Counts)
	}
	if got := d.Quantile(0.5); !near(got, 0.002) {
		t.Errorf("p50 = %v, want 0.002", got)
	}
	if got := d.Quantile(0.95); !near(got, 0.002+0.002*45/49) {
		t.Errorf("p95 = %v", got)
	}
	if got := d.Quantile(0.99); !near(got, 0.004) {
		t.Errorf("p99 = %v, want 0.004 (rank 99 is the last of the (2,4ms] bucket)", got)
	}
	if !math.IsInf(d.MaxBucket(), 1) {
		t.Errorf("max bucket %v, want +Inf", d.MaxBucket())
	}
	if n, ok := ParsePromValue(after, "walpost_messages_published_total", "sink", "discard"); !ok || n != 120 {
		t.Errorf("published = %v, %v", n, ok)
	}
	if _, err := h0.Sub(h1); err == nil {
		t.Error("a counter going down must be an error")
	}
	missing, err := ParsePromHistogram(strings.NewReader(other), "walpost_end_to_end_latency_seconds", "sink", "file")
	if err != nil || missing != nil {
		t.Errorf("absent series: %v, %v", missing, err)
	}
}

// pgoutput message builders (protocol version 1).
func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func TestPgoutputReaderFindsCommitTimesAndCountsInserts(t *testing.T) {
	commit := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	us := uint64(commit.Sub(pgEpoch) / time.Microsecond)
	rel := cat([]byte{'R'}, be32(16384), []byte("public\x00outbox\x00"), []byte{'d'}, be16(2),
		[]byte{1}, []byte("id\x00"), be32(2950), be32(0xffffffff),
		[]byte{0}, []byte("payload\x00"), be32(3802), be32(0xffffffff))
	begin := cat([]byte{'B'}, be64(0x1000), be64(us), be32(7))
	// A payload holding newlines and a NUL-free binary-ish value: the reader
	// must not split on them.
	val := []byte("{\"ts\": 1,\n\"pad\": \"a\nb\"}")
	ins := cat([]byte{'I'}, be32(16384), []byte{'N'}, be16(3),
		[]byte{'t'}, be32(4), []byte("abcd"), []byte{'n'}, []byte{'t'}, be32(uint32(len(val))), val)
	typ := cat([]byte{'Y'}, be32(99), []byte("public\x00mytype\x00"))
	com := cat([]byte{'C'}, []byte{0}, be64(0x1000), be64(0x1050), be64(us))
	var stream []byte
	for _, m := range [][]byte{rel, typ, begin, ins, ins, com} {
		stream = append(append(stream, m...), '\n')
	}
	var times []time.Time
	var ends []uint64
	rd := &pgoutputReader{r: bufio.NewReader(bytes.NewReader(stream)),
		OnInsert: func(ct time.Time) { times = append(times, ct) },
		OnCommit: func(end uint64) { ends = append(ends, end) }}
	var kinds []byte
	for {
		k, err := rd.Next()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("after %q: %v", kinds, err)
			}
			break
		}
		kinds = append(kinds, k)
	}
	if string(kinds) != "RYBIIC" {
		t.Fatalf("kinds %q", kinds)
	}
	if len(times) != 2 || !times[0].Equal(commit) {
		t.Fatalf("commit times %v, want 2 × %v", times, commit)
	}
	if !slices.Equal(ends, []uint64{0x1050}) {
		t.Fatalf("commit ends %x", ends)
	}

	bad := append(slices.Clone(begin), 'x')
	rd = &pgoutputReader{r: bufio.NewReader(bytes.NewReader(bad))}
	if _, err := rd.Next(); err != errFraming {
		t.Fatalf("no newline after a message: %v, want errFraming", err)
	}
	rd = &pgoutputReader{r: bufio.NewReader(bytes.NewReader(begin[:10]))}
	if _, err := rd.Next(); err == nil || err.Error() != "unexpected EOF" {
		t.Fatalf("truncated message: %v", err)
	}
}

func TestPayloadTS(t *testing.T) {
	for in, want := range map[string]int64{
		`{"n": 1, "ts": 1733150000123456, "pad": "x"}`: 1733150000123456,
		`{"ts":42}`: 42,
	} {
		if got, ok := payloadTS([]byte(in)); !ok || got != want {
			t.Errorf("payloadTS(%s) = %d, %v", in, got, ok)
		}
	}
	if _, ok := payloadTS([]byte(`{"n": 1}`)); ok {
		t.Error("no ts: want false")
	}
}

func TestParseStatCountsFieldsAfterTheCommand(t *testing.T) {
	line := "1234 (a b) c)) S 77 1234 1234 0 -1 4194560 100 0 0 0 250 30 7 3 20 0 1 0 100 1000 200"
	s, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if s.ppid != 77 || s.utime != 250 || s.stime != 30 || s.cutime != 7 || s.cstime != 3 {
		t.Fatalf("%+v", s)
	}
	if !near(s.cpu(), 2.8) || !near(s.childCPU(), 0.1) {
		t.Fatalf("cpu %v child %v", s.cpu(), s.childCPU())
	}
}

func TestSelectSystems(t *testing.T) {
	got, err := selectSystems("walpost_*, ceiling")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"ceiling", "walpost_discard", "walpost_file", "walpost_kafka", "walpost_fanout3", "walpost_nats", "walpost_rabbitmq", "walpost_sqs", "walpost_sns", "walpost_pubsub"}) {
		t.Fatalf("got %v", names)
	}
	if _, err := selectSystems("nope"); err == nil {
		t.Fatal("unknown system: want an error")
	}
	if _, err := selectWorkloads("catchup,nope"); err == nil {
		t.Fatal("unknown workload: want an error")
	}
}

// fakeReport has a measured ceiling, walpost→discard and tuned polling, a
// failed file run and an n/a Kafka run.
func fakeReport() *report {
	lat := func(p50 float64) *Hist {
		h := NewHist()
		for i := range 1000 {
			h.Observe(p50 * (0.5 + float64(i)/1000))
		}
		return h
	}
	res := []*runResult{
		{System: "ceiling", Workload: wCatchUp, Produced: 1000, Delivered: 1000, Seconds: 0.01, RelayCPU: 0.01, PeakRSSMB: 8},
		{System: "walpost_discard", Workload: wCatchUp, Produced: 1000, Delivered: 1000, Seconds: 0.0125, RelayCPU: 0.02, PeakRSSMB: 20},
		{System: "walpost_file", Workload: wCatchUp, Err: "cdc run exited: exit status 1"},
		{System: "walpost_kafka", Workload: wCatchUp, Err: "n/a: cmd/cdc does not register the kafka sink"},
		{System: "poll_tuned", Workload: wCatchUp, Produced: 1000, Delivered: 1000, Seconds: 0.05, QPS: 40,
			Load: &tableLoad{DeadTuples: 1000, PartialIdxBytes: 40960}},
		{System: "poll_tuned_drain", Workload: wCatchUp, Produced: 1000, Delivered: 1000, Seconds: 0.02},
		{System: "ceiling", Workload: wPaced1k, Produced: 100, Delivered: 100, Seconds: 0.1, Hist: lat(0.0005)},
		{System: "walpost_discard", Workload: wPaced1k, Produced: 100, Delivered: 100, Seconds: 0.1, Hist: lat(0.001), PeakRSSMB: 120},
		{System: "poll_tuned", Workload: wPaced1k, Produced: 100, Delivered: 100, Seconds: 0.1, Hist: lat(0.06)},
	}
	for _, r := range res {
		r.finish()
	}
	return newReport(machineInfo{CPUs: 2, Postgres: "15.20", Date: "2026-01-02 03:04 UTC"}, paramsFor(true), true,
		allSystems, allWorkloads, res, time.Minute)
}

func TestJSONLineHasExactlyTheKeysWithNullsForWhatWasNotMeasured(t *testing.T) {
	var m map[string]any
	line := fakeReport().jsonLine()
	if strings.Contains(line, "\n") {
		t.Fatal("JSON must be one line")
	}
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatal(err)
	}
	want := []string{"ceiling_msgs_per_s", "walpost_discard_msgs_per_s", "walpost_file_msgs_per_s", "walpost_kafka_msgs_per_s",
		"poll_classic_msgs_per_s", "poll_tuned_msgs_per_s", "ceiling_p99_ms", "walpost_discard_p99_ms", "walpost_file_p99_ms",
		"poll_tuned_p99_ms", "walpost_peak_rss_mb", "walpost_nats_msgs_per_s", "walpost_rabbitmq_msgs_per_s",
		"decode_ceiling_msgs_per_s", "walpost_fanout3_msgs_per_s", "walpost_cpu_us_per_msg_1k", "walpost_kafka_cpu_us_per_msg_1k",
		"pg_recvlogical_cpu_us_per_msg_1k", "walpost_kafka_p99_ms", "walpost_bigmsg_peak_rss_mb", "walpost_bigmsg_size_mb", "mechanisms"}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("keys %v, want %v", keys, want)
	}
	if m["ceiling_msgs_per_s"] != 100000.0 || m["walpost_discard_msgs_per_s"] != 80000.0 {
		t.Errorf("rates: %v, %v", m["ceiling_msgs_per_s"], m["walpost_discard_msgs_per_s"])
	}
	for _, k := range []string{"walpost_file_msgs_per_s", "walpost_kafka_msgs_per_s", "poll_classic_msgs_per_s", "walpost_file_p99_ms",
		"walpost_nats_msgs_per_s", "walpost_rabbitmq_msgs_per_s", "mechanisms"} {
		if m[k] != nil {
			t.Errorf("%s = %v, want null", k, m[k])
		}
	}
	if m["walpost_peak_rss_mb"] != 120.0 {
		t.Errorf("peak RSS %v, want the largest walpost run's", m["walpost_peak_rss_mb"])
	}
	if p, ok := m["walpost_discard_p99_ms"].(float64); !ok || p <= 1.4 || p > 1.82 {
		t.Errorf("walpost_discard_p99_ms = %v", m["walpost_discard_p99_ms"])
	}
}

func TestMarkdownReportsTargetsPassFailAndNotMeasured(t *testing.T) {
	md := fakeReport().markdown("bench/results.png")
	for _, want := range []string{
		"![throughput and latency](bench/results.png)",
		"| CPUs (nproc) | 2 |",
		"fsync=off",
		"| catch-up walpost→discard vs pg_recvlogical | ≥ 1.0× | 0.800× (80,000 vs 100,000 msgs/s) | **FAIL** |",
		"| catch-up walpost→discard vs tuned polling | ≥ 3× | 4.00× (80,000 vs 20,000 msgs/s) | **pass** |",
		"| catch-up walpost→discard vs tuned polling (draining) | none (reference) | 1.60× (80,000 vs 50,000 msgs/s) | – |",
		"| tuned polling, draining (as above, but polls again at once after a full batch) | 1,000 | 0.02 | 50,000 | 0.50× |",
		"| catch-up walpost→kafka vs pg_recvlogical | ≥ 1.0× | n/a: walpost→kafka cmd/cdc does not register the kafka sink | not measured |",
		"walpost→file failed",
		"| peak RSS of walpost→discard, every run but the 50 MiB message (incl. the big transaction) | ≤ 100 MB | 120.0 MB (paced1k); big transaction not measured | **FAIL** |",
		"| walpost → discard | 1,000 | 0.01 | 80,000 | 0.80× |",
		"| tuned polling (100 ms, 1,000 rows, SKIP LOCKED, UPDATE per batch) | catchup | 40.0 | 1,000 | 1,000 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
}

func TestWriteChartWritesAPNG(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "results.png")
	if err := writeChart(p, fakeReport()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 500 {
		t.Fatalf("chart is %v", b)
	}
}

func TestMedianRunPicksTheMiddleRateAndKeepsTheRange(t *testing.T) {
	mk := func(rate float64) *runResult {
		r := &runResult{System: "walpost_discard", Workload: wCatchUp, Delivered: 1000, Seconds: 1000 / rate}
		r.finish()
		return r
	}
	failed := &runResult{System: "walpost_discard", Workload: wCatchUp, Err: "cdc run exited"}
	m := medianRun([]*runResult{mk(80_000), failed, mk(100_000), mk(90_000)})
	if m.MsgsPerS < 89_999 || m.MsgsPerS > 90_001 || m.Repeats != 3 || m.RateMin < 79_999 || m.RateMax < 99_999 {
		t.Fatalf("median %.0f of %d runs, range %.0f–%.0f; want 90,000 of 3, 80,000–100,000", m.MsgsPerS, m.Repeats, m.RateMin, m.RateMax)
	}
	if m := medianRun([]*runResult{mk(80_000), mk(100_000)}); m.MsgsPerS > 80_001 {
		t.Fatalf("even count: got %.0f, want the slower middle run", m.MsgsPerS)
	}
	if m := medianRun([]*runResult{failed}); m != failed {
		t.Fatal("no successful run: want the failed one back")
	}
	if m := medianRun([]*runResult{mk(70_000)}); m.Repeats != 0 {
		t.Fatalf("a single run has Repeats %d, want 0 (no range shown)", m.Repeats)
	}
}

func TestReportPathsLeaveTheRepositoryAloneUnlessAsked(t *testing.T) {
	root := t.TempDir()
	// Default: a new temporary file, the chart beside it.
	md, png, err := reportPaths(options{root: root})
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(md)
	if !strings.HasPrefix(md, os.TempDir()) || !strings.HasSuffix(md, ".md") || png != strings.TrimSuffix(md, ".md")+".png" {
		t.Fatalf("default: report %q, chart %q; want a temporary .md with its .png beside it", md, png)
	}
	if _, err := os.Stat(md); err != nil {
		t.Fatalf("the temporary report file: %v", err)
	}
	for _, c := range []struct {
		o        options
		md, png  string
		contains bool
	}{
		// The committed report, named either way, regenerates the committed chart.
		{o: options{root: root, out: filepath.Join(root, "BENCHMARKS.md"), outSet: true},
			md: filepath.Join(root, "BENCHMARKS.md"), png: filepath.Join(root, "bench", "results.png")},
		{o: options{root: root, out: filepath.Join(root, "x", "..", "BENCHMARKS.md"), outSet: true},
			md: filepath.Join(root, "x", "..", "BENCHMARKS.md"), png: filepath.Join(root, "bench", "results.png")},
		// Another file: the chart beside it.
		{o: options{root: root, out: "/tmp/q.md", outSet: true}, md: "/tmp/q.md", png: "/tmp/q.png"},
		// Stdout: no chart unless asked for; none: none.
		{o: options{root: root, out: "-", outSet: true}, md: "-", png: ""},
		{o: options{root: root, out: "-", outSet: true, png: "/tmp/c.png", pngSet: true}, md: "-", png: "/tmp/c.png"},
		{o: options{root: root, out: "", outSet: true}, md: "", png: ""},
		// -png '' turns the chart off.
		{o: options{root: root, out: "/tmp/q.md", outSet: true, png: "", pngSet: true}, md: "/tmp/q.md", png: ""},
	} {
		md, png, err := reportPaths(c.o)
		if err != nil || md != c.md || png != c.png {
			t.Errorf("%+v: report %q chart %q (%v); want %q, %q", c.o, md, png, err, c.md, c.png)
		}
	}
}

func TestSinkYAMLForTheBrokers(t *testing.T) {
	name, y := sinkYAML("nats", "/d", sinkDest{NATSStream: "WPBENCH_AB", NATSSubject: "wpbench.ab.{type}"})
	if name != "nats" || y != `  - {name: nats, kind: nats, servers: ["nats://127.0.0.1:4222"], subject: "wpbench.ab.{type}", stream: {name: WPBENCH_AB}}` {
		t.Errorf("nats: %s %s", name, y)
	}
	name, y = sinkYAML("rabbitmq", "/d", sinkDest{RabbitExchange: "walpost.bench.x.ab"})
	if name != "rabbitmq" || y != `  - {name: rabbitmq, kind: rabbitmq, url: "amqp://guest:guest@127.0.0.1:5672/", exchange: walpost.bench.x.ab}` {
		t.Errorf("rabbitmq: %s %s", name, y)
	}
}

// TestCDCConfigCarriesTheReceiveBuffer: -receive-buffer reaches the
// relay's config as postgres.receive_buffer, and without it the key is
// left out (the relay's default).
func TestCDCConfigCarriesTheReceiveBuffer(t *testing.T) {
	for _, tc := range []struct {
		flag string
		want int
	}{{"", 0}, {"auto", 0}, {"kernel", 0}, {"131072", 131072}} {
		dir := t.TempDir()
		_, sinks := sinksYAML("discard", dir, sinkDest{})
		p, err := writeCDCConfig(dir, "postgres://u@127.0.0.1:5432/db", newNames("wp", "t"), sinks, 9999, false, tc.flag)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(p)
		if has := strings.Contains(string(raw), "receive_buffer"); has != (tc.flag != "") {
			t.Errorf("-receive-buffer %q: receive_buffer in the config is %t:\n%s", tc.flag, has, raw)
		}
		cfg, err := config.Load(p)
		if err != nil {
			t.Fatalf("-receive-buffer %q: %v\n%s", tc.flag, err, raw)
		}
		if got := cfg.Postgres.ReceiveBufferBytes(); got != tc.want {
			t.Errorf("-receive-buffer %q: the relay gets %d, want %d", tc.flag, got, tc.want)
		}
	}
}

// TestMachineReportsVirtualizationAndSteal: the hypervisor flag of
// /proc/cpuinfo and the steal column of /proc/stat (the 8th value of its
// first line) reach the machine table.
func TestMachineReportsVirtualizationAndSteal(t *testing.T) {
	if got := virtualization("processor\t: 0\nflags\t\t: fpu vme hypervisor lahf_lm\n"); !strings.Contains(got, "virtual machine") {
		t.Errorf("with the hypervisor flag: %q", got)
	}
	if got := virtualization("processor\t: 0\nflags\t\t: fpu vme lahf_lm\n"); got != "none reported by the CPU" {
		t.Errorf("without it: %q", got)
	}
	ticks, ok := cpuTicks("cpu  45296 0 36224 300975 1817 0 2674 8018 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
	if !ok || ticks[statSteal] != 8018 || ticks[statUser] != 45296 || ticks[statIdle] != 300975 {
		t.Errorf("ticks %v %t, want user 45296, idle 300975, steal 8018", ticks, ok)
	}
	if _, ok := cpuTicks("cpu0 1 2 3 4 5 6 7 8 9 10\n"); ok {
		t.Error("a line that is not the all-CPU one gave ticks")
	}
	if got, want := stealShare(12, 100*time.Second, 2), "6.0% of the CPU time over the run (/proc/stat steal: 12.0 s of 200 s on 2 CPUs)"; got != want {
		t.Errorf("share %q, want %q", got, want)
	}
}
