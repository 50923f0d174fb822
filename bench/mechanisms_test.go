package main

import (
	"encoding/json"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMechOrderTakesTurnsAndReversesEveryOtherRound(t *testing.T) {
	if got := mechOrder(testMechanisms, 0); !slices.Equal(got, []string{"", "rawnet", "coalesce", "rcvbuf"}) {
		t.Errorf("round 0: %q", got)
	}
	if got := mechOrder(testMechanisms, 1); !slices.Equal(got, []string{"rcvbuf", "coalesce", "rawnet", ""}) {
		t.Errorf("round 1: %q", got)
	}
	// Over two rounds every configuration has the same mean place, so a
	// steady drift of the machine favours none.
	place := map[string]int{}
	for round := range 2 {
		for i, c := range mechOrder(testMechanisms, round) {
			place[c] += i
		}
	}
	for c, p := range place {
		if p != 3 {
			t.Errorf("configuration %q: places add up to %d over two rounds, want 3", c, p)
		}
	}
}

func TestParamsMechRounds(t *testing.T) {
	full, quick := paramsFor(false), paramsFor(true)
	if full.mechRounds(wCatchUp) != 4 || full.mechRounds(wPaced1k) != 2 || quick.mechRounds(wCatchUp) != 1 || quick.mechRounds(wPaced1k) != 1 {
		t.Errorf("rounds: full %d/%d, quick %d/%d", full.mechRounds(wCatchUp), full.mechRounds(wPaced1k), quick.mechRounds(wCatchUp), quick.mechRounds(wPaced1k))
	}
}

func TestSelectMechanisms(t *testing.T) {
	names := func(ms []mechanism) string { return mechanismNamesOf(ms) }
	for _, c := range []struct {
		flag, only string
		quick      bool
		want       string
		err        bool
	}{
		{"", "", false, "rawnet", false},          // a full run
		{"", "", true, "", false},                 // -quick
		{"", "walpost_discard", false, "", false}, // -only: not the full run
		{"", "@mechanisms", true, "rawnet", false},
		{"none", "@mechanisms", false, "", false},
		{"all", "", true, "rawnet", false},
		{"rawnet, rawnet", "", true, "rawnet", false},
		{"coalesce", "", true, "", true}, // removed by issue 34
		{"rcvbuf", "", true, "", true},   // removed by issue 24
		{"arena", "", false, "", true},
	} {
		got, err := selectMechanisms(c.flag, c.only, c.quick)
		if (err != nil) != c.err || names(got) != c.want {
			t.Errorf("-mechanisms %q -only %q quick %v: %q, %v; want %q (error %v)", c.flag, c.only, c.quick, names(got), err, c.want, c.err)
		}
	}
}

func TestMechSystemSetsOnlyTheSwitchOff(t *testing.T) {
	s := mechSystem(mechMeasures[1], testMechanisms, "coalesce")
	if s.Name != "walpost_kafka" || s.Sink != "kafka" || !slices.Equal(s.Env, []string{"WALPOST_COALESCE=off"}) {
		t.Errorf("%+v", s)
	}
	if s := mechSystem(mechMeasures[0], testMechanisms, ""); s.Name != "walpost_discard" || len(s.Env) != 0 {
		t.Errorf("every mechanism on: %+v", s)
	}
	if tag := mechSystem(mechMeasures[2], testMechanisms, "rawnet").tag(); tag != "walpost_discard [WALPOST_RAWNET=off]" {
		t.Errorf("tag %q", tag)
	}
}

// mechRuns builds the section's runs: for each configuration, catch-up
// rates to discard and Kafka (msgs/s) and paced CPU (µs/msg) as given.
func mechRuns(cfg map[string][3][]float64) []*mechRun {
	var out []*mechRun
	offs := slices.Sorted(maps.Keys(cfg))
	for _, off := range offs {
		ms := cfg[off]
		for i, vs := range ms {
			m := mechMeasures[i]
			for round, v := range vs {
				r := &runResult{System: m.System, Workload: m.Workload, Produced: 100_000, Delivered: 100_000, Attempts: 1}
				if m.Higher {
					r.Seconds = 100_000 / v
				} else {
					r.Seconds, r.RelayCPU = 20, v*100_000/1e6
				}
				r.finish()
				out = append(out, &mechRun{Off: off, Round: round, runResult: r})
			}
		}
	}
	return out
}

func TestCompareMechanismGainAndClear(t *testing.T) {
	runs := mechRuns(map[string][3][]float64{
		"":         {{300_000, 320_000, 310_000, 290_000}, {250_000, 260_000}, {50, 54}},
		"rawnet":   {{280_000, 300_000, 305_000, 295_000}, {240_000, 255_000}, {80, 90}},
		"coalesce": {{200_000, 210_000, 190_000, 220_000}, {261_000, 270_000}, {50, 53}},
	})
	c := compareMechanism(runs, testMechanisms[0], mechMeasures[0], 0.3)
	if c.On.N != 4 || c.Off.N != 4 || math.Abs(c.On.Median-305_000) > 1e-6 || math.Abs(c.Off.Median-297_500) > 1e-6 {
		t.Fatalf("rawnet, catch-up discard: %+v", c)
	}
	if math.Abs(c.Gain-(305_000.0/297_500-1)) > 1e-9 || c.Clear {
		t.Errorf("rawnet, catch-up discard: gain %v clear %v; want a small gain within the spread", c.Gain, c.Clear)
	}
	c = compareMechanism(runs, testMechanisms[0], mechMeasures[2], 0.3)
	if math.Abs(c.Gain-(1-52.0/85)) > 1e-9 || !c.Clear {
		t.Errorf("rawnet, paced CPU: gain %v clear %v; want a clear gain (52 against 85 µs/msg)", c.Gain, c.Clear)
	}
	if got := gainCell(c); got != "-38.8% CPU" {
		t.Errorf("gain cell %q", got)
	}
	c = compareMechanism(runs, testMechanisms[1], mechMeasures[0], 0.3)
	if !c.Clear || c.Gain <= 0 || gainCell(c) != "+48.8% msgs/s" {
		t.Errorf("coalesce, catch-up discard: gain %v (%s) clear %v; want a clear gain", c.Gain, gainCell(c), c.Clear)
	}
	c = compareMechanism(runs, testMechanisms[1], mechMeasures[1], 0.3)
	if !c.Clear || c.Gain >= 0 {
		t.Errorf("coalesce, catch-up kafka: gain %v clear %v; want a clear loss", c.Gain, c.Clear)
	}
	c = compareMechanism(runs, testMechanisms[2], mechMeasures[0], 0.3)
	if c.Off.N != 0 || !math.IsNaN(c.Gain) || c.Clear {
		t.Errorf("rcvbuf never switched off: %+v", c)
	}
	cs := []mechComparison{}
	for _, mech := range testMechanisms[:2] {
		for _, m := range mechMeasures {
			cs = append(cs, compareMechanism(runs, mech, m, 0.3))
		}
	}
	if v := mechVerdict(cs, "rawnet"); v != "gain" {
		t.Errorf("rawnet: %s", v)
	}
	if v := mechVerdict(cs, "coalesce"); v != "mixed" {
		t.Errorf("coalesce: %s", v)
	}
	if v := mechVerdict(cs, "rcvbuf"); v != "within the spread" {
		t.Errorf("rcvbuf: %s", v)
	}
}

// A single run a side gives a gain but never a clear one; a failed run
// is counted apart.
func TestCompareMechanismWithOneRunASideIsNeverClear(t *testing.T) {
	runs := mechRuns(map[string][3][]float64{"": {{300_000}, nil, nil}, "rcvbuf": {{100_000}, nil, nil}})
	runs = append(runs, &mechRun{Off: "rcvbuf", runResult: &runResult{System: "walpost_discard", Workload: wCatchUp, Err: "cdc run exited"}})
	c := compareMechanism(runs, testMechanisms[2], mechMeasures[0], 0.3)
	if c.Clear || math.Abs(c.Gain-2) > 1e-9 || c.Off.Failed != 1 {
		t.Errorf("%+v", c)
	}
}

func TestMechanismsSectionInTheReport(t *testing.T) {
	r := newReport(machineInfo{CPUs: 2, Date: "2026-12-05 10:00 UTC"}, paramsFor(false), false, nil, nil, nil, 7*time.Minute)
	r.Mechanisms = testMechanisms
	r.MechRuns = mechRuns(map[string][3][]float64{
		"":         {{300_000, 320_000, 310_000, 290_000}, {250_000, 260_000, 255_000, 245_000}, {50, 54}},
		"rawnet":   {{280_000, 300_000, 305_000, 295_000}, {240_000, 255_000, 250_000, 245_000}, {80, 90}},
		"coalesce": {{200_000, 210_000, 190_000, 220_000}, {200_000, 190_000, 180_000, 170_000}, {50, 53}},
		"rcvbuf":   {{280_000, 330_000, 300_000, 310_000}, {250_000, 240_000, 260_000, 255_000}, {52, 51}},
	})
	md := r.markdown("")
	for _, want := range []string{
		"## Low-level mechanisms switched off",
		"(4 rounds of catch-ups, 2 of 1,000 tx/s runs)", "catch-up of a 200,000-row backlog to discard and to Kafka; 1,000 single-row transactions/s for 20s to discard",
		"| raw system calls on the replication and Kafka sockets (internal/rawnet) | `WALPOST_RAWNET=off` | gain |",
		"| coalesced reads while behind (SO_RCVLOWAT, internal/replication) | `WALPOST_COALESCE=off` | gain |",
		"| 64 KiB receive buffer on low-latency links (SO_RCVBUF, postgres.receive_buffer: auto) | `WALPOST_RCVBUF=off` | within the spread |",
		"| `WALPOST_RAWNET` | paced 1,000 tx/s walpost→discard: relay CPU, µs/msg | 52.0 (50.0–54.0) | 85.0 (80.0–90.0) | 2 / 2 | -38.8% CPU | **yes** |",
		"| `WALPOST_COALESCE` | catch-up walpost→discard, msgs/s | 305,000 (290,000–320,000) | 205,000 (190,000–220,000) | 4 / 4 | +48.8% msgs/s | **yes** |",
		"| `WALPOST_RCVBUF` | catch-up walpost→discard, msgs/s | 305,000 (290,000–320,000) | 305,000 (280,000–330,000) | 4 / 4 | +0.0% msgs/s | no |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if strings.Contains(md, "## Targets") || strings.Contains(md, "## Catch-up") {
		t.Error("a report of the mechanisms section alone has main tables")
	}
	if t.Failed() {
		t.Log(md)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(r.jsonLine()), &m); err != nil {
		t.Fatal(err)
	}
	rows, _ := m["mechanisms"].([]any)
	if len(rows) != 9 {
		t.Fatalf("mechanisms in the JSON line: %v", m["mechanisms"])
	}
	first := rows[0].(map[string]any)
	if first["mechanism"] != "rawnet" || first["env"] != "WALPOST_RAWNET" || first["measure"] != "catchup_discard_msgs_per_s" ||
		first["on"] != 305000.0 || first["off"] != 297500.0 || first["clear"] != false {
		t.Errorf("first row %v", first)
	}
	if s := r.summary(); !strings.Contains(s, "mechanism: WALPOST_COALESCE=off, catch-up walpost→kafka: on 252,500 (245,000–260,000), off 185,000 (170,000–200,000) (4 / 4 runs): gain +36.5% msgs/s, clear") {
		t.Errorf("summary:\n%s", s)
	}
}

func TestLoggedOffFindsTheSwitchLine(t *testing.T) {
	log := `{"level":"info","message":"connecting"}
{"level":"info","env":"WALPOST_RAWNET","value":"off","mechanism":"raw system calls","on":false,"message":"low-level mechanism switched off by the environment"}
{"level":"warn","env":"WALPOST_COALESCE","value":"of","on":true,"message":"low-level switch not understood"}
{"level":"info","env":"WALPOST_RCVBUF","value":"on","on":true,"message":"low-level mechanism left on by the environment"}`
	if !loggedOff(log, "WALPOST_RAWNET") || loggedOff(log, "WALPOST_COALESCE") || loggedOff(log, "WALPOST_RCVBUF") {
		t.Error("loggedOff: want WALPOST_RAWNET only")
	}
	dir := t.TempDir()
	p := &cdcProc{logPath: filepath.Join(dir, "cdc.log")}
	if err := os.WriteFile(p.logPath, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.switchedOff([]string{"WALPOST_RAWNET=off"}); err != nil {
		t.Error(err)
	}
	if err := p.switchedOff([]string{"WALPOST_COALESCE=off"}); err == nil || !strings.Contains(err.Error(), "WALPOST_COALESCE=off") {
		t.Errorf("a switch the relay did not report: %v", err)
	}
	if err := p.switchedOff(nil); err != nil {
		t.Error(err)
	}
}

// The bench finds the product's go.mod above its own, and takes relative
// report paths from the root it found, so -out BENCHMARKS.md is the
// committed file from bench/ as from the root.
func TestFindRootAndPathsRelativeToIt(t *testing.T) {
	root := t.TempDir()
	bench := filepath.Join(root, "bench")
	if err := os.MkdirAll(filepath.Join(bench, "testdata"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "go.mod"), "module github.com/walpost/walpost\n\ngo 1.26.8\n")
	write(filepath.Join(bench, "go.mod"), "module github.com/walpost/walpost/bench\n\nreplace github.com/walpost/walpost => ../\n")
	for _, dir := range []string{root, bench, filepath.Join(bench, "testdata")} {
		if got, err := findRoot(dir); err != nil || got != root {
			t.Errorf("findRoot(%s) = %q, %v; want %s", dir, got, err, root)
		}
	}
	if _, err := findRoot(t.TempDir()); err == nil {
		t.Error("findRoot outside a repository: want an error")
	}
	o := options{root: root, out: "BENCHMARKS.md", png: "x/c.png", pprofDir: "/tmp/prof"}
	if err := o.resolvePaths(); err != nil {
		t.Fatal(err)
	}
	if o.out != filepath.Join(root, "BENCHMARKS.md") || o.png != filepath.Join(root, "x", "c.png") || o.pprofDir != "/tmp/prof" {
		t.Errorf("resolved %+v", o)
	}
	md, png, err := reportPaths(options{root: root, out: o.out, outSet: true})
	if err != nil || md != filepath.Join(root, "BENCHMARKS.md") || png != filepath.Join(root, "bench", "results.png") {
		t.Errorf("the committed report: %q %q %v", md, png, err)
	}
	for _, keep := range []string{"-", ""} {
		o := options{root: root, out: keep}
		if err := o.resolvePaths(); err != nil || o.out != keep {
			t.Errorf("-out %q became %q", keep, o.out)
		}
	}
}

// testMechanisms are the relay's mechanism and two more, the coalesced
// reads issue 34 removed and the receive buffer issue 24 removed, so that
// the tests cover three configurations besides "all on".
var testMechanisms = append(slices.Clone(allMechanisms),
	mechanism{Name: "coalesce", Env: "WALPOST_COALESCE", Label: "coalesced reads while behind (SO_RCVLOWAT, internal/replication)"},
	mechanism{Name: "rcvbuf", Env: "WALPOST_RCVBUF",
		Label: "64 KiB receive buffer on low-latency links (SO_RCVBUF, postgres.receive_buffer: auto)"})
