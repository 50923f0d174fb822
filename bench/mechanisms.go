package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/walpost/walpost/internal/rawnet"
)

// mechanism is one of the relay's low-level mechanisms (below net.Conn or
// outside the ordinary Go path) with the environment variable that turns
// it off.
type mechanism struct {
	Name  string // for -mechanisms and the JSON line
	Env   string // its switch
	Label string // for the report
}

// allMechanisms are the mechanisms the section switches off, in the order
// it reports them. (The 64 KiB receive buffer, WALPOST_RCVBUF, was removed
// by issue 24 and coalesced reads, WALPOST_COALESCE, by issue 34: no clear
// gain on two full runs.)
var allMechanisms = []mechanism{
	{Name: "rawnet", Env: rawnet.EnvRawSyscalls,
		Label: "raw system calls on the replication and Kafka sockets (internal/rawnet)"},
}

func mechanismNames() string {
	var n []string
	for _, m := range allMechanisms {
		n = append(n, m.Name)
	}
	return strings.Join(n, ",")
}

// selectMechanisms applies -mechanisms: all, none, or names; left out,
// all in a full run without -only or with -only @mechanisms, none
// otherwise.
func selectMechanisms(flagValue, only string, quick bool) ([]mechanism, error) {
	v := strings.TrimSpace(flagValue)
	switch {
	case v == "" && strings.TrimSpace(only) == "@mechanisms":
		return allMechanisms, nil
	case v == "" && !quick && strings.TrimSpace(only) == "":
		return allMechanisms, nil
	case v == "" || v == "none":
		return nil, nil
	case v == "all":
		return allMechanisms, nil
	}
	var out []mechanism
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(allMechanisms, func(m mechanism) bool { return m.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("-mechanisms: unknown mechanism %q (all, none, or of %s)", name, mechanismNames())
		}
		if !slices.ContainsFunc(out, func(m mechanism) bool { return m.Name == name }) {
			out = append(out, allMechanisms[i])
		}
	}
	return out, nil
}

// mechMeasure is one row of the main tables that the section runs again
// with each mechanism off: the same system and workload, and the figure
// compared.
type mechMeasure struct {
	Key      string // for the JSON line
	System   string
	Workload string
	What     string // for the report
	Unit     string
	Value    func(*runResult) float64
	Higher   bool // a higher value is better (a rate), else lower (CPU)
}

var mechMeasures = []mechMeasure{
	{Key: "catchup_discard_msgs_per_s", System: "walpost_discard", Workload: wCatchUp,
		What: "catch-up walpost→discard", Unit: "msgs/s", Value: rate, Higher: true},
	{Key: "catchup_kafka_msgs_per_s", System: "walpost_kafka", Workload: wCatchUp,
		What: "catch-up walpost→kafka", Unit: "msgs/s", Value: rate, Higher: true},
	{Key: "paced1k_discard_cpu_us_per_msg", System: "walpost_discard", Workload: wPaced1k,
		What: "paced 1,000 tx/s walpost→discard: relay CPU", Unit: "µs/msg", Value: cpuPerMsg},
}

// mechRun is one run of the section: Off is the mechanism switched off
// ("" for the runs with every mechanism on).
type mechRun struct {
	Off   string `json:"off"`
	Round int    `json:"round"`
	*runResult
}

// mechOrder is the order in which round round runs its configurations:
// every mechanism on ("") and then each off in even rounds, the reverse
// in odd ones, so that over two rounds each configuration has the same
// mean place and a drift of the machine favours none of them.
func mechOrder(mechs []mechanism, round int) []string {
	order := []string{""}
	for _, m := range mechs {
		order = append(order, m.Name)
	}
	if round%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// mechRounds is how many rounds the section runs workload w.
func (p params) mechRounds(w string) int {
	if w == wPaced1k {
		return max(1, p.MechRounds/2)
	}
	return max(1, p.MechRounds)
}

// mechSystem is the system of measure m with the switch of mechanism off
// turned off ("" : every mechanism on).
func mechSystem(m mechMeasure, mechs []mechanism, off string) system {
	var s system
	for _, x := range allSystems {
		if x.Name == m.System {
			s = x
		}
	}
	s.Only = nil
	for _, x := range mechs {
		if x.Name == off {
			s.Env = []string{x.Env + "=off"}
		}
	}
	return s
}

// runMechanisms runs the section of low-level mechanisms switched off:
// for each workload of mechMeasures among workloads, p.mechRounds rounds,
// each running every measure's system with every mechanism on and with
// each of b.mechs off, in mechOrder.
func (b *bench) runMechanisms(ctx context.Context, workloads []string) {
	if len(b.mechs) == 0 {
		return
	}
	catchUps, paced := 0, 0
	for _, w := range []string{wCatchUp, wPaced1k} {
		if !slices.Contains(workloads, w) {
			continue
		}
		for _, m := range mechMeasures {
			if m.Workload != w {
				continue
			}
			n := b.p.mechRounds(w) * (len(b.mechs) + 1)
			if w == wCatchUp {
				catchUps += n
			} else {
				paced += n
			}
		}
	}
	b.logf("low-level mechanisms switched off (%s): %d catch-up runs of %s rows and %d runs of %s at 1,000 tx/s",
		mechanismNamesOf(b.mechs), catchUps, commas(int64(b.p.CatchUpN)), paced, b.p.PacedDur)
	for _, w := range []string{wCatchUp, wPaced1k} {
		if !slices.Contains(workloads, w) {
			continue
		}
		for round := range b.p.mechRounds(w) {
			for _, off := range mechOrder(b.mechs, round) {
				for _, m := range mechMeasures {
					if m.Workload != w {
						continue
					}
					s := mechSystem(m, b.mechs, off)
					if missing := b.missingSink(s); missing != "" {
						b.mechRuns = append(b.mechRuns, &mechRun{Off: off, Round: round, runResult: &runResult{System: s.Name, Workload: w,
							Err: "n/a: " + b.cdcPkg + " does not register the " + missing + " sink"}})
						continue
					}
					b.mechRuns = append(b.mechRuns, &mechRun{Off: off, Round: round, runResult: b.runQuietly(ctx, s, w)})
				}
			}
		}
	}
}

func mechanismNamesOf(ms []mechanism) string {
	var n []string
	for _, m := range ms {
		n = append(n, m.Name)
	}
	return strings.Join(n, ", ")
}

// dropSwitchesFromEnv removes the low-level switches from the bench's
// environment, which every relay inherits: the main rows run with every
// mechanism on, and the mechanisms section sets each switch itself.
func (b *bench) dropSwitchesFromEnv() {
	for _, m := range allMechanisms {
		if v, ok := os.LookupEnv(m.Env); ok {
			b.logf("%s=%s is set in the bench's environment: every relay is started without it (the mechanisms section switches %s off itself)", m.Env, v, m.Name)
			os.Unsetenv(m.Env)
		}
	}
}

// mechStats summarises the runs of one configuration for one measure.
type mechStats struct {
	N, Failed, NA int     // runs that gave a value, that failed, that could not run (n/a)
	Median        float64 // of the values (mean of the middle two for an even count); NaN without a run
	Min, Max      float64
	Values        []float64
	DisturbedRuns int // runs with other load above the noisy threshold (kept: the least disturbed attempt)
}

func statsOf(runs []*mechRun, m mechMeasure, off string, noisy float64) mechStats {
	st := mechStats{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	for _, x := range runs {
		if x.Off != off || x.System != m.System || x.Workload != m.Workload {
			continue
		}
		if !x.ok() {
			if strings.HasPrefix(x.Err, "n/a") {
				st.NA++
			} else {
				st.Failed++
			}
			continue
		}
		v := m.Value(x.runResult)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			st.Failed++
			continue
		}
		st.Values = append(st.Values, v)
		if noisy > 0 && x.OtherCores > noisy {
			st.DisturbedRuns++
		}
	}
	st.N = len(st.Values)
	if st.N == 0 {
		return st
	}
	vs := slices.Clone(st.Values)
	sort.Float64s(vs)
	st.Min, st.Max = vs[0], vs[len(vs)-1]
	if len(vs)%2 == 1 {
		st.Median = vs[len(vs)/2]
	} else {
		st.Median = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	return st
}

// mechComparison is one row of the section: a mechanism, a measure, its
// runs with the mechanism on and off, and the gain.
type mechComparison struct {
	Mech    mechanism
	Measure mechMeasure
	On, Off mechStats
	// Gain is what the mechanism buys, as a fraction: for a rate the
	// on median over the off median less 1 (0.10: 10% faster with it);
	// for CPU 1 less on over off (0.10: 10% less CPU with it). NaN when
	// either side has no run.
	Gain float64
	// Clear: every run with the mechanism on beat every run with it off
	// (Gain > 0), or the reverse (Gain < 0); false when the ranges overlap
	// or a side has fewer than two runs.
	Clear bool
}

func compareMechanism(runs []*mechRun, mech mechanism, m mechMeasure, noisy float64) mechComparison {
	c := mechComparison{Mech: mech, Measure: m, On: statsOf(runs, m, "", noisy), Off: statsOf(runs, m, mech.Name, noisy), Gain: math.NaN()}
	if c.On.N == 0 || c.Off.N == 0 || c.Off.Median == 0 || c.On.Median == 0 {
		return c
	}
	if m.Higher {
		c.Gain = c.On.Median/c.Off.Median - 1
	} else {
		c.Gain = 1 - c.On.Median/c.Off.Median
	}
	if c.On.N >= 2 && c.Off.N >= 2 {
		better := func(a, b float64) bool { return m.Higher && a > b || !m.Higher && a < b }
		worstOn, bestOn, worstOff, bestOff := c.On.Min, c.On.Max, c.Off.Min, c.Off.Max
		if !m.Higher {
			worstOn, bestOn, worstOff, bestOff = c.On.Max, c.On.Min, c.Off.Max, c.Off.Min
		}
		c.Clear = better(worstOn, bestOff) || better(worstOff, bestOn)
	}
	return c
}

// mechComparisons are the section's rows: each mechanism against each
// measure that ran.
func (r *report) mechComparisons() []mechComparison {
	var out []mechComparison
	for _, mech := range r.Mechanisms {
		for _, m := range mechMeasures {
			c := compareMechanism(r.MechRuns, mech, m, r.P.Noisy)
			if c.On.N+c.On.Failed+c.On.NA+c.Off.N+c.Off.Failed+c.Off.NA == 0 {
				continue // not run (-runs)
			}
			out = append(out, c)
		}
	}
	return out
}

// mechVerdict says what the runs show of mechanism mech: "gain" when a
// row shows a clear gain and none a clear loss, "loss" for the reverse,
// "mixed" when rows disagree clearly, else "within the spread".
func mechVerdict(cs []mechComparison, mech string) string {
	gain, loss := false, false
	for _, c := range cs {
		if c.Mech.Name != mech || !c.Clear {
			continue
		}
		gain = gain || c.Gain > 0
		loss = loss || c.Gain < 0
	}
	switch {
	case gain && loss:
		return "mixed"
	case gain:
		return "gain"
	case loss:
		return "loss"
	}
	return "within the spread"
}

// mechFigure is one row of the section in the JSON line.
type mechFigure struct {
	Mechanism string   `json:"mechanism"`
	Env       string   `json:"env"`
	Measure   string   `json:"measure"`
	On        *float64 `json:"on"`
	Off       *float64 `json:"off"`
	Runs      [2]int   `json:"runs"` // successful runs on, off
	Gain      *float64 `json:"gain"`
	Clear     bool     `json:"clear"`
}

// mechFigures are the section's rows for the JSON line (nil: not run).
func (r *report) mechFigures() []mechFigure {
	var out []mechFigure
	f := func(v float64, digits int) *float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		p := math.Pow(10, float64(digits))
		x := math.Round(v*p) / p
		return &x
	}
	for _, c := range r.mechComparisons() {
		out = append(out, mechFigure{Mechanism: c.Mech.Name, Env: c.Mech.Env, Measure: c.Measure.Key,
			On: f(c.On.Median, 2), Off: f(c.Off.Median, 2), Runs: [2]int{c.On.N, c.Off.N}, Gain: f(c.Gain, 4), Clear: c.Clear})
	}
	return out
}

// writeMechanisms writes the section of low-level mechanisms switched off.
func (r *report) writeMechanisms(p printer) {
	cs := r.mechComparisons()
	if len(cs) == 0 {
		return
	}
	p("## Low-level mechanisms switched off\n\n")
	p("Each mechanism below `net.Conn` or outside the ordinary Go path has an environment variable that turns it off "+
		"(read once when the relay starts, logged at info; the bench checks that line in every run below). This section runs "+
		"three rows of the main tables again, with the same workloads (catch-up of a %s-row backlog to discard and to Kafka; "+
		"1,000 single-row transactions/s for %s to discard, for the relay's CPU per message), with every mechanism on and "+
		"with each switched off in turn. ", commas(int64(r.P.CatchUpN)), r.P.PacedDur)
	p("The configurations take turns round by round (%s of catch-ups, %d of 1,000 tx/s runs), in the reverse order "+
		"every other round, so that a drift of the machine favours none of them; every catch-up is on a fresh backlog. "+
		"*on* and *off* are the medians of those runs (range in brackets). *Gain* is what the mechanism buys: for a rate, "+
		"on ÷ off − 1; for CPU per message, 1 − on ÷ off (positive: less CPU with it). *Clear* means that every run with "+
		"the mechanism on beat every run with it off (or the reverse, for a loss); otherwise the difference is within the "+
		"runs' spread. A mechanism pays when it shows a clear end-to-end gain, on two separate full runs.\n\n",
		plural(r.P.mechRounds(wCatchUp), "round"), r.P.mechRounds(wPaced1k))
	p("| mechanism | switch | in this run |\n|---|---|---|\n")
	for _, mech := range r.Mechanisms {
		p("| %s | `%s=off` | %s |\n", mech.Label, mech.Env, mechVerdict(cs, mech.Name))
	}
	p("\n| switch | measure | on | off | runs on / off | gain with it on | clear? |\n|---|---|---:|---:|---:|---:|---|\n")
	for _, c := range cs {
		runs := fmt.Sprintf("%d / %d", c.On.N, c.Off.N)
		var notes []string
		if n := c.On.NA + c.Off.NA; n > 0 {
			notes = append(notes, fmt.Sprintf("%d n/a", n))
		}
		if n := c.On.Failed + c.Off.Failed; n > 0 {
			notes = append(notes, fmt.Sprintf("%d failed", n))
		}
		if n := c.On.DisturbedRuns + c.Off.DisturbedRuns; n > 0 {
			notes = append(notes, fmt.Sprintf("%d disturbed", n))
		}
		if len(notes) > 0 {
			runs += " (" + strings.Join(notes, ", ") + ")"
		}
		clear := "no"
		switch {
		case math.IsNaN(c.Gain):
			clear = "–"
		case c.Clear && c.Gain > 0:
			clear = "**yes**"
		case c.Clear:
			clear = "**yes, a loss**"
		}
		p("| %s | %s, %s | %s | %s | %s | %s | %s |\n", "`"+c.Mech.Env+"`", c.Measure.What, c.Measure.Unit,
			mechCell(c.On), mechCell(c.Off), runs, gainCell(c), clear)
	}
	p("\n")
}

// mechCell is a median with its range.
func mechCell(st mechStats) string {
	if st.N == 0 {
		return "–"
	}
	if st.N == 1 {
		return num(st.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", num(st.Median), num(st.Min), num(st.Max))
}

// gainCell is the gain as a signed percentage of the measure.
func gainCell(c mechComparison) string {
	if math.IsNaN(c.Gain) {
		return "–"
	}
	if c.Measure.Higher {
		return fmt.Sprintf("%+.1f%% %s", 100*c.Gain, c.Measure.Unit)
	}
	return fmt.Sprintf("%+.1f%% CPU", -100*c.Gain)
}

// plural is "1 round", "4 rounds".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
