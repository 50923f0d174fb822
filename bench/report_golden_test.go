package main

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite bench/testdata/report_* from the current code")

// latency is a histogram of 1,000 latencies spread evenly over
// [p50/2, 1.5·p50), plus one observation of `slow` seconds when slow > 0.
func latency(p50, slow float64) *Hist {
	h := NewHist()
	for i := range 1000 {
		h.Observe(p50 * (0.5 + float64(i)/1000))
	}
	if slow > 0 {
		h.Observe(slow)
	}
	return h
}

// finished runs finish on every result, as runOne does, and returns them.
func finished(rs ...*runResult) []*runResult {
	for _, r := range rs {
		r.finish()
	}
	return rs
}

// fullReport is a full run with every section, every system and every
// workload: passes, FAILs, n/a and failed runs, capped and behind polling
// relays, repeated and retried runs, an error cell to trim; a NATS run
// (no target) and a RabbitMQ run skipped for want of a server.
func fullReport() *report {
	load := func(dead int64) *tableLoad {
		return &tableLoad{DeadTuples: dead, LiveTuples: 200_000, Autovacuums: 2, PartialIdxBytes: 4 << 20, PKeyBytes: 9 << 10, TableBytes: 700}
	}
	naKafka := "n/a: ./cmd/cdc does not register the kafka sink"
	longErr := "poller exited: exit status 2 | stderr: " +
		"pq: could not serialize access due to concurrent update | while marking rows sent in a transaction that had already claimed them with SKIP LOCKED and a timer that fired late\ngoroutine 1 [running]"
	res := finished(
		&runResult{System: "decode_ceiling", Workload: wCatchUp, Produced: 200_000, Delivered: 200_000, Seconds: 0.5,
			ServerCPU: 0.52, OtherCores: 0.03, Attempts: 1},
		&runResult{System: "ceiling", Workload: wCatchUp, Produced: 200_000, Delivered: 200_000, Seconds: 2, RelayCPU: 1.5,
			CtxSwitches: 3000, ServerCPU: 2.2, PeakRSSMB: 9.3, OtherCores: 0.12, Attempts: 1},
		&runResult{System: "walpost_discard", Workload: wCatchUp, Produced: 200_000, Delivered: 200_000, Seconds: 1.25, RelayCPU: 1.1,
			CtxSwitches: 900, ServerCPU: 1.9, PeakRSSMB: 24.5, OtherCores: 0.2, Attempts: 2},
		&runResult{System: "walpost_file", Workload: wCatchUp, Produced: 200_000, Delivered: 200_000, Seconds: 2.8, RelayCPU: 1.7,
			CtxSwitches: 5200, ServerCPU: 2.5, PeakRSSMB: 26.1, OtherCores: 0.05, Attempts: 1},
		&runResult{System: "walpost_kafka", Workload: wCatchUp, Err: naKafka},
		&runResult{System: "walpost_fanout3", Workload: wCatchUp, Err: "n/a: ./cmd/cdc does not register the kafka sink"},
		&runResult{System: "walpost_nats", Workload: wCatchUp, Produced: 200_000, Delivered: 200_000, Seconds: 8, RelayCPU: 2.4,
			CtxSwitches: 30_000, ServerCPU: 2.6, PeakRSSMB: 31.2, OtherCores: 1.1, Attempts: 1},
		&runResult{System: "walpost_rabbitmq", Workload: wCatchUp, Attempts: 1,
			Err: "skipped: no RabbitMQ at 127.0.0.1:5672 (dial tcp 127.0.0.1:5672: connect: connection refused)"},
		&runResult{System: "poll_classic", Workload: wCatchUp, Produced: 200_000, Delivered: 580, Seconds: 30, Capped: true, RelayCPU: 0.4,
			CtxSwitches: 1200, ServerCPU: 0.9, PeakRSSMB: 12, OtherCores: 0.4, Attempts: 1, Queries: 1190, QPS: 39.5, Load: load(580)},
		&runResult{System: "poll_classic_100ms", Workload: wCatchUp, Attempts: 1, Err: longErr},
		&runResult{System: "poll_tuned", Workload: wCatchUp, Produced: 200_000, Delivered: 200_000, Seconds: 20, RelayCPU: 2.3,
			CtxSwitches: 4000, ServerCPU: 6.1, PeakRSSMB: 14.2, OtherCores: 0.31, Attempts: 4, Queries: 600, QPS: 29.7, Load: load(200_000)},
		&runResult{System: "poll_tuned_drain", Workload: wCatchUp, Produced: 200_000, Delivered: 200_000, Seconds: 3.1, RelayCPU: 2.0,
			CtxSwitches: 3500, ServerCPU: 5.5, PeakRSSMB: 15, OtherCores: 0.1, Attempts: 1, Queries: 800, QPS: 250.4, Load: load(199_000)},

		&runResult{System: "ceiling", Workload: wPaced1k, Produced: 20_000, Delivered: 20_000, Seconds: 20, Hist: latency(0.0004, 0),
			RelayCPU: 0.8, CtxSwitches: 40_000, ServerCPU: 9.5, PeakRSSMB: 9, OtherCores: 0.1, Attempts: 1},
		&runResult{System: "walpost_discard", Workload: wPaced1k, Produced: 20_000, Delivered: 20_000, Seconds: 20, Hist: latency(0.0005, 0),
			RelayCPU: 0.7, CtxSwitches: 21_000, ServerCPU: 9.7, PeakRSSMB: 22, OtherCores: 0.15, Attempts: 1},
		&runResult{System: "walpost_file", Workload: wPaced1k, Produced: 20_000, Delivered: 20_000, Seconds: 20, Hist: latency(0.003, 0),
			RelayCPU: 1.2, CtxSwitches: 25_000, ServerCPU: 9.9, PeakRSSMB: 23, OtherCores: 0.2, Attempts: 3},
		&runResult{System: "walpost_kafka", Workload: wPaced1k, Attempts: 1, Err: "cdc run exited: exit status 1"},
		&runResult{System: "poll_classic", Workload: wPaced1k, Produced: 20_000, Delivered: 120, Seconds: 20, Hist: latency(8, 1e9),
			RelayCPU: 0.1, CtxSwitches: 300, ServerCPU: 8.8, PeakRSSMB: 11, OtherCores: 0.05, Attempts: 1, Queries: 150, QPS: 5.9,
			Backlog: 19_880, Load: load(120)},
		&runResult{System: "poll_classic_100ms", Workload: wPaced1k, Produced: 20_000, Seconds: 20, RelayCPU: 0.1, ServerCPU: 8, Attempts: 1,
			Backlog: 20_000},
		&runResult{System: "poll_tuned", Workload: wPaced1k, Produced: 20_000, Delivered: 20_000, Seconds: 20, Hist: latency(0.06, 0),
			RelayCPU: 0.9, CtxSwitches: 6000, ServerCPU: 9.1, PeakRSSMB: 13, OtherCores: 0.9, Attempts: 4, Queries: 420, QPS: 20.8, Load: load(20_000)},

		&runResult{System: "ceiling", Workload: wPaced2k, Produced: 40_000, Delivered: 40_000, Seconds: 20, Hist: latency(0.0027, 0),
			RelayCPU: 0.6, CtxSwitches: 30_000, ServerCPU: 4.1, PeakRSSMB: 9, OtherCores: 0.1, Attempts: 1},
		&runResult{System: "walpost_discard", Workload: wPaced2k, Produced: 40_000, Delivered: 40_000, Seconds: 20, Hist: latency(0.0025, 0),
			RelayCPU: 0.5, CtxSwitches: 2000, ServerCPU: 4.2, PeakRSSMB: 25, OtherCores: 0.1, Attempts: 1},
		&runResult{System: "walpost_file", Workload: wPaced2k, Produced: 40_000, Delivered: 40_000, Seconds: 20, Hist: latency(0.02, 0),
			RelayCPU: 0.9, CtxSwitches: 2500, ServerCPU: 4.4, PeakRSSMB: 27, OtherCores: 0.1, Attempts: 1},
		&runResult{System: "walpost_kafka", Workload: wPaced2k, Produced: 40_000, Delivered: 40_000, Seconds: 20,
			RelayCPU: 0.8, CtxSwitches: 2400, ServerCPU: 4.3, PeakRSSMB: 31, OtherCores: 0.1, Attempts: 1},
		&runResult{System: "poll_classic", Workload: wPaced2k, Produced: 40_000, Delivered: 400, Seconds: 20, Hist: latency(9, 0),
			RelayCPU: 0.1, CtxSwitches: 310, ServerCPU: 4, PeakRSSMB: 11, OtherCores: 0.05, Attempts: 1, Queries: 430, QPS: 17.2,
			Backlog: 39_600, Load: load(400)},
		&runResult{System: "poll_tuned", Workload: wPaced2k, Produced: 40_000, Delivered: 40_000, Seconds: 20, Hist: latency(0.08, 0),
			RelayCPU: 0.7, CtxSwitches: 5000, ServerCPU: 4.6, PeakRSSMB: 13, OtherCores: 0.2, Attempts: 1, Queries: 410, QPS: 20.1, Load: load(40_000)},

		&runResult{System: "ceiling", Workload: wBigTx, Produced: 1_000_000, Delivered: 1_000_000, Seconds: 9.5, RelayCPU: 6,
			CtxSwitches: 9000, ServerCPU: 11, PeakRSSMB: 9.8, OtherCores: 0.1, Attempts: 1},
		&runResult{System: "walpost_discard", Workload: wBigTx, Produced: 1_000_000, Delivered: 1_000_000, Seconds: 6.2, RelayCPU: 5,
			CtxSwitches: 4000, ServerCPU: 10, PeakRSSMB: 28.6, OtherCores: 0.1, Attempts: 1},
		&runResult{System: "walpost_file", Workload: wBigTx, Produced: 1_000_000, Delivered: 1_000_000, Seconds: 7.9, RelayCPU: 6.5,
			CtxSwitches: 6000, ServerCPU: 10.5, PeakRSSMB: 130.4, OtherCores: 0.1, Attempts: 1},
		&runResult{System: "walpost_kafka", Workload: wBigTx, Err: naKafka},

		&runResult{System: "walpost_discard", Workload: wBigMsg, Produced: 1, Delivered: 1, Seconds: 1.9, RelayCPU: 0.6,
			CtxSwitches: 400, ServerCPU: 0.9, PeakRSSMB: 131.2, OtherCores: 0.02, Attempts: 1, MsgBytes: 52_428_820},
		&runResult{System: "walpost_file", Workload: wBigMsg, Produced: 1, Delivered: 1, Seconds: 2.4, RelayCPU: 0.9,
			CtxSwitches: 500, ServerCPU: 0.9, PeakRSSMB: 230.8, OtherCores: 0.4, Attempts: 2, MsgBytes: 52_428_820},
	)
	for _, x := range res {
		if x.Workload == wCatchUp && (x.System == "decode_ceiling" || x.System == "ceiling" || x.System == "walpost_discard") {
			x.Repeats, x.RateMin, x.RateMax = 5, x.MsgsPerS*0.93, x.MsgsPerS*1.04
		}
	}
	p := paramsFor(false)
	p.Noise, p.Noisy, p.Retries = 50, 0.3, 3
	m := machineInfo{Date: "2026-12-03 03:35 UTC", CPUs: 2, CPUModel: "AMD EPYC", MemoryGB: "23.5 GiB", Kernel: "6.18.44",
		Go: "go1.26.8", Postgres: "15.20 (Debian 15.20-0+deb12u1)", LoadAvg: "0.25 0.55 0.85",
		Fdatasync:      "p50 0.19 ms, p99 0.38 ms, max 4.10 ms (10288 × 4 KiB append + fdatasync in 2s, in the file sink's directory)",
		Virtualization: virtualization("processor\t: 0\nflags\t\t: fpu vme hypervisor lahf_lm\n"),
		Steal:          stealShare(66.2, 552*time.Second, 2)}
	r := newReport(m, p, false, allSystems, allWorkloads, res, 9*time.Minute+12*time.Second+400*time.Millisecond)
	// The mechanisms section: Kafka is n/a in this binary, WALPOST_RCVBUF
	// has one failed run, one run was disturbed.
	r.Mechanisms = testMechanisms
	r.MechRuns = mechRuns(map[string][3][]float64{
		"":         {{300_000, 320_000, 310_000, 290_000}, nil, {50, 54}},
		"rawnet":   {{280_000, 300_000, 305_000, 295_000}, nil, {80, 90}},
		"coalesce": {{200_000, 210_000, 190_000, 220_000}, nil, {50, 53}},
		"rcvbuf":   {{280_000, 330_000, 300_000}, nil, {52, 51}},
	})
	r.MechRuns[0].OtherCores = 0.8
	for _, off := range []string{"", "rawnet", "coalesce", "rcvbuf"} {
		r.MechRuns = append(r.MechRuns, &mechRun{Off: off, runResult: &runResult{System: "walpost_kafka", Workload: wCatchUp, Err: naKafka}})
	}
	r.MechRuns = append(r.MechRuns, &mechRun{Off: "rcvbuf", Round: 3, runResult: &runResult{System: "walpost_discard", Workload: wCatchUp,
		Err: "cdc run exited: exit status 1"}})
	return r
}

// quickReport is a -quick run of some systems and workloads only: the
// ceiling, Kafka, tuned polling, paced2k and the big transaction were not
// run, so their targets say why; poll_classic_100ms has no catch-up run.
func quickReport() *report {
	systems, err := selectSystems("walpost_discard,walpost_file,poll_classic*,poll_tuned_drain")
	if err != nil {
		panic(err)
	}
	res := finished(
		&runResult{System: "walpost_discard", Workload: wCatchUp, Produced: 50_000, Delivered: 50_000, Seconds: 0.4, RelayCPU: 0.3,
			CtxSwitches: 200, ServerCPU: 0.5, PeakRSSMB: 21, OtherCores: 0.6, Attempts: 1},
		&runResult{System: "walpost_file", Workload: wCatchUp, Produced: 50_000, Delivered: 50_000, Seconds: 0.55, RelayCPU: 0.4,
			CtxSwitches: 700, ServerCPU: 0.6, PeakRSSMB: 23.3, OtherCores: 0.7, Attempts: 1},
		&runResult{System: "poll_classic", Workload: wCatchUp, Produced: 50_000, Delivered: 100, Seconds: 5, Capped: true, RelayCPU: 0.05,
			CtxSwitches: 90, ServerCPU: 0.1, PeakRSSMB: 10, OtherCores: 0.2, Attempts: 1, Queries: 110, QPS: 18.3,
			Load: &tableLoad{DeadTuples: 100, PartialIdxBytes: 900, PKeyBytes: 1 << 20, TableBytes: 3 << 20}},
		&runResult{System: "poll_tuned_drain", Workload: wCatchUp, Produced: 50_000, Delivered: 50_000, Seconds: 1, RelayCPU: 0.5,
			CtxSwitches: 400, ServerCPU: 1.2, PeakRSSMB: 13, OtherCores: 0.3, Attempts: 1},
		&runResult{System: "walpost_discard", Workload: wPaced1k, Produced: 6000, Delivered: 6000, Seconds: 6, Hist: latency(0.0007, 0),
			RelayCPU: 0.2, CtxSwitches: 6100, ServerCPU: 2.9, PeakRSSMB: 19.5, OtherCores: 0.5, Attempts: 1},
		&runResult{System: "walpost_file", Workload: wPaced1k, Attempts: 1, Err: "waiting for the slot: timed out after 1m0s"},
		&runResult{System: "poll_classic", Workload: wPaced1k, Produced: 6000, Delivered: 40, Seconds: 6, Hist: latency(3, 0),
			RelayCPU: 0.01, CtxSwitches: 20, ServerCPU: 2.5, PeakRSSMB: 10, OtherCores: 0.4, Attempts: 1, Queries: 48, QPS: 6.9,
			Backlog: 5960, Load: &tableLoad{DeadTuples: 40, Autovacuums: 0, PartialIdxBytes: 512, PKeyBytes: 2048, TableBytes: 8192}},
		&runResult{System: "poll_classic_100ms", Workload: wPaced1k, Produced: 6000, Delivered: 6000, Seconds: 6, Hist: latency(0.5, 0),
			RelayCPU: 0.3, CtxSwitches: 800, ServerCPU: 3.1, PeakRSSMB: 10.5, OtherCores: 0.45, Attempts: 1, Queries: 1200, QPS: 150},
	)
	m := machineInfo{Date: "2026-12-04 10:00 UTC", CPUs: 2, CPUModel: "AMD EPYC", MemoryGB: "23.5 GiB", Kernel: "6.18.44",
		Go: "go1.26.8", Postgres: "15.20", LoadAvg: "1.10 0.90 0.70"}
	r := newReport(m, paramsFor(true), true, systems, []string{wCatchUp, wPaced1k}, res, 2*time.Minute+40*time.Second)
	r.KafkaMem = true
	return r
}

// TestReportMatchesGolden pins the markdown report, the stdout summary and
// the -json line, byte for byte, for a full and a -quick run. Regenerate
// with go test ./bench -run TestReportMatchesGolden -update after a change
// meant to alter them.
func TestReportMatchesGolden(t *testing.T) {
	for _, c := range []struct {
		name string
		rep  *report
		png  string
	}{
		{"full", fullReport(), "bench/results.png"},
		{"quick", quickReport(), ""},
	} {
		for ext, got := range map[string]string{
			"md":      c.rep.markdown(c.png),
			"summary": c.rep.summary(),
			"json":    c.rep.jsonLine() + "\n",
		} {
			path := filepath.Join("testdata", "report_"+c.name+"."+ext)
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from the current output; got:\n%s", path, got)
			}
		}
	}
}
