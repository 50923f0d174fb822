// Command bench measures walpost side by side with the stream's own speed
// (pg_recvlogical) and with two polling relays, on one throwaway PostgreSQL
// cluster (internal/pgtest, fsync=off, synchronous_commit=on), and writes
// a markdown report and a chart. Running it changes no file of the
// repository unless -out (or -png) says so: by default the report goes to
// a new temporary file and the chart beside it, and the bench prints where.
//
// The bench is a module of its own (bench/go.mod, which replaces
// github.com/walpost/walpost with ../), so that its dependencies (the
// chart's golang.org/x/image) stay out of the product's go.mod. Run it
// from the repository root with go -C bench run . (or make bench), or
// from bench/ with go run .; it finds the repository root itself (-root),
// and relative -out, -png and -pprof paths are taken from that root, so
// -out BENCHMARKS.md means the committed file wherever it is run from.
//
//	go -C bench run .                   full run (about 17 minutes on a quiet 2-core machine, ~6 of them the mechanisms section)
//	go -C bench run . -out BENCHMARKS.md   ... regenerating the committed BENCHMARKS.md and bench/results.png
//	go -C bench run . -quick            smaller run (under 3 minutes; no mechanisms section)
//	go -C bench run . -quick -json      ... and the figures as JSON on the last line of stdout
//	go -C bench run . -out -            the report on stdout (no chart unless -png)
//	go -C bench run . -only ceiling,walpost_discard -runs catchup
//	go -C bench run . -only walpost_kafka -runs paced1k -pprof /tmp/prof   CPU profiles of the relay
//	go -C bench run . -quick -only @bar -json   only the rows of the performance bar
//	go -C bench run . -only @mechanisms         only the low-level mechanisms switched off
//	go -C bench run . -quick -only @mechanisms -mechanism-rounds 1   ... a short look at them
//	go -C bench run . -only @idle -retries 0   only the idle fleet: 20 idle sources, CPU and RSS (about 2 minutes)
//
// Workloads: catch-up (a backlog of 1,000-row transactions committed first,
// then the system started and timed to its last message), paced (1,000
// single-row transactions/s, and 2,000 messages/s in 100-row
// transactions), one big transaction (1,000,000 rows) and one 50 MiB
// message (bigmsg, walpost → discard and → file) for memory. Each
// system gets a fresh outbox table, publication and slot per run, dropped
// afterwards.
//
// Systems: decode_ceiling (PostgreSQL decoding the catch-up backlog
// in-server: pg_logical_slot_peek_binary_changes, no client), ceiling
// (pg_recvlogical), walpost_discard, walpost_file, walpost_kafka (the cdc
// binary, built from ./cmd/cdc, as a subprocess; the Kafka broker is an
// in-process kfake), walpost_fanout3 (file + Kafka + discard from one
// slot, catch-up only), walpost_nats and walpost_rabbitmq
// (catch-up only, no targets yet: a stream, or an exchange and a queue, of
// the run's own on the machine's NATS at 127.0.0.1:4222 and RabbitMQ at
// 127.0.0.1:5672; skipped when the server does not answer), poll_classic (1 s timer, 20 rows,
// one commit per message), poll_classic_100ms, poll_tuned (one poll per
// 100 ms tick, 1,000 rows with FOR UPDATE SKIP LOCKED, one UPDATE per
// batch), and poll_tuned_drain (the same, polling again at once after a
// full batch; catch-up only).
//
// Low-level mechanisms switched off (mechanisms.go; full runs, or
// -mechanisms): the catch-up to discard and to Kafka and the 1,000 tx/s
// run to discard again, with every mechanism on and with each switch
// (WALPOST_RAWNET) off in turn, taking
// turns round by round, and the gain of each mechanism.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
)

// system is one thing measured.
type system struct {
	Name  string // for -only and JSON
	Label string // for the table
	Kind  string // ceiling | walpost | poll
	Sink  string // walpost: discard | file | kafka
	Poll  pollerSpec
	Only  []string // workloads it runs in (nil: all)
	// Env is added to the relay's environment: the low-level switches a
	// run of the mechanisms section turns off (KEY=off).
	Env []string
}

// tag names the system in the log, with its switches.
func (s system) tag() string {
	if len(s.Env) == 0 {
		return s.Name
	}
	return s.Name + " [" + strings.Join(s.Env, " ") + "]"
}

var allSystems = []system{
	// Not a reader: PostgreSQL decoding the backlog in-server
	// (pg_logical_slot_peek_binary_changes, pgoutput), with no client and
	// no socket; the ceiling of the catch-up table since issue #16.
	{Name: "decode_ceiling", Label: "PostgreSQL decoding in-server (ceiling: peek_binary_changes, no client)", Kind: "decode",
		Only: []string{wCatchUp}},
	{Name: "ceiling", Label: "pg_recvlogical (ceiling)", Kind: "ceiling"},
	{Name: "walpost_discard", Label: "walpost → discard", Kind: "walpost", Sink: "discard"},
	{Name: "walpost_file", Label: "walpost → file (fsync per batch)", Kind: "walpost", Sink: "file"},
	{Name: "walpost_kafka", Label: "walpost → Kafka (kfake, acks=all)", Kind: "walpost", Sink: "kafka"},
	// Three sinks at once from one slot (issue #16's fan-out target).
	{Name: "walpost_fanout3", Label: "walpost → file + Kafka + discard (three sinks, one slot)", Kind: "walpost", Sink: sinkFanout3,
		Only: []string{wCatchUp}},
	// No targets yet: catch-up only, against the machine's own servers
	// (see brokers.go), reported beside the others.
	{Name: "walpost_nats", Label: "walpost → NATS JetStream (file storage, PubAck per message)", Kind: "walpost", Sink: "nats",
		Only: []string{wCatchUp}},
	{Name: "walpost_rabbitmq", Label: "walpost → RabbitMQ (durable classic queue, persistent, confirms)", Kind: "walpost", Sink: "rabbitmq",
		Only: []string{wCatchUp}},
	{Name: "walpost_sqs", Label: "walpost → SQS FIFO queue (sqsfake in process, SendMessageBatch of 10)", Kind: "walpost", Sink: "sqs",
		Only: []string{wCatchUp}},
	{Name: "walpost_sns", Label: "walpost → SNS FIFO topic (snsfake in process, PublishBatch of 10)", Kind: "walpost", Sink: "sns",
		Only: []string{wCatchUp}},
	{Name: "walpost_pubsub", Label: "walpost → Pub/Sub (pstest in process, ordering keys)", Kind: "walpost", Sink: "pubsub",
		Only: []string{wCatchUp}},
	{Name: "poll_classic", Label: "classic polling (1 s, 20 rows, commit per message)", Kind: "poll",
		Poll: pollerSpec{Mode: "classic", Interval: time.Second, Batch: 20}},
	{Name: "poll_classic_100ms", Label: "classic polling (100 ms, 20 rows, commit per message)", Kind: "poll",
		Poll: pollerSpec{Mode: "classic", Interval: 100 * time.Millisecond, Batch: 20}},
	{Name: "poll_tuned", Label: "tuned polling (100 ms, 1,000 rows, SKIP LOCKED, UPDATE per batch)", Kind: "poll",
		Poll: pollerSpec{Mode: "tuned", Interval: 100 * time.Millisecond, Batch: 1000}},
	// Not a system issue #6 asks for: the tuned relay polling again at
	// once after a full batch. It differs from poll_tuned only while a
	// backlog lasts (the paced runs bring at most 200 rows per 100 ms), so
	// it runs in catch-up only.
	{Name: "poll_tuned_drain", Label: "tuned polling, draining (as above, but polls again at once after a full batch)", Kind: "poll",
		Poll: pollerSpec{Mode: "tuned", Interval: 100 * time.Millisecond, Batch: 1000, Drain: true}, Only: []string{wCatchUp}},
}

// notesFile holds the hand-written part of BENCHMARKS.md, relative to the
// repository root; the tool appends it after what it generates.
const notesFile = "bench/NOTES.md"

// workload names.
const (
	wCatchUp = "catchup"
	wPaced1k = "paced1k"
	wPaced2k = "paced2k"
	wBigTx   = "bigtx"
	wBigMsg  = "bigmsg"
)

var allWorkloads = []string{wCatchUp, wPaced1k, wPaced2k, wBigTx, wBigMsg}

// workloadSystems restricts a workload to some systems (a workload not
// listed runs on every system, as their Only allows). One 50 MiB message
// measures the relay's memory: a Kafka broker refuses it (1 MB by
// default), and neither the ceiling nor a polling relay holds it.
var workloadSystems = map[string][]string{
	wBigMsg: {"walpost_discard", "walpost_file"},
}

// presets are named selections of -only: each runs the listed systems
// in the listed workloads only (not their cross product). -runs, when
// given too, narrows the workloads further.
var presets = map[string]map[string][]string{
	// The performance bar (issue #24): catch-up to discard and to Kafka
	// against pg_recvlogical, three sinks against the slowest of them
	// alone (so file too), relay CPU per message and Kafka's p99 at 1,000
	// tx/s, one 50 MiB message; and the in-server decode for reference.
	"@bar": barPreset,
	// Issue #16's rows, whose targets the bar replaced: the same runs.
	"@issue16": barPreset,
	// No main rows: only the section of low-level mechanisms switched
	// off (its catch-up and 1,000 tx/s runs).
	"@mechanisms": {wCatchUp: nil, wPaced1k: nil},
}

var barPreset = map[string][]string{
	wCatchUp: {"decode_ceiling", "ceiling", "walpost_discard", "walpost_file", "walpost_kafka", "walpost_fanout3"},
	wPaced1k: {"ceiling", "walpost_discard", "walpost_kafka"},
	wBigMsg:  {"walpost_discard", "walpost_file"},
}

// params are the sizes of a run.
type params struct {
	CatchUpN   int
	TxRows     int
	PacedDur   time.Duration
	PollCap    time.Duration // longest catch-up of a polling relay
	PollDrain  time.Duration // longest wait for a polling relay after a paced run
	BigN       int
	Noise      float64 // unrelated writes per second (0: none)
	Noisy      float64 // other load (cores) above which a run is disturbed
	Retries    int     // how often a disturbed run is repeated
	RelayLimit time.Duration
	// CatchUpRepeats is how often each non-polling system runs the
	// catch-up workload (the median run is reported).
	CatchUpRepeats int
	// BigMsgBytes is the size of the one message of the bigmsg workload
	// (its JSON payload's blob; the payload is a few bytes more).
	BigMsgBytes int
	// MechRounds is how many rounds the mechanisms section runs its
	// catch-ups (each round: every mechanism on, and each switched off);
	// its 1,000 tx/s runs take half as many, at least one.
	MechRounds int
}

func paramsFor(quick bool) params {
	if quick {
		return params{CatchUpN: 50_000, TxRows: 1000, PacedDur: 6 * time.Second, PollCap: 5 * time.Second,
			PollDrain: time.Second, BigN: 200_000, RelayLimit: 5 * time.Minute, CatchUpRepeats: 1, BigMsgBytes: bigMsgBytes,
			MechRounds: 1}
	}
	return params{CatchUpN: 200_000, TxRows: 1000, PacedDur: 20 * time.Second, PollCap: 30 * time.Second,
		PollDrain: 5 * time.Second, BigN: 1_000_000, RelayLimit: 15 * time.Minute, CatchUpRepeats: 5, BigMsgBytes: bigMsgBytes,
		MechRounds: 4}
}

// bigMsgBytes is the blob of the bigmsg workload's one message: 50 MiB
// (the same in a -quick run, so that its target means the same).
const bigMsgBytes = 50 << 20

// bench is one invocation.
type bench struct {
	p       params
	quick   bool
	cluster *pgtest.Cluster
	url     string
	conn    *pgx.Conn // control connection: setup, LSNs, slot polling
	cdc     string
	sinks   map[string]bool // sink kinds of sinkPkgs the cdc binary registers
	tmp     string
	log     io.Writer
	results []*runResult
	machine machineInfo
	started time.Time
	// stealStart: the machine's steal time (s) when the bench started;
	// stealOK: /proc/stat told it.
	stealStart float64
	stealOK    bool
	closers    []func()
	// ceilingPipe: pg_recvlogical writes to a pipe in catch-up runs too.
	ceilingPipe bool
	cdcPkg      string
	kafkaMem    bool
	// pprofDir: walpost runs with http.pprof and its paced runs are
	// profiled into this directory.
	pprofDir string
	// receiveBuffer: postgres.receive_buffer of walpost's runs ("": the
	// relay's default, auto).
	receiveBuffer string
	// pairs, from a preset of -only: the systems each workload runs (nil:
	// every selected system).
	pairs map[string][]string
	// mechs are the mechanisms the mechanisms section switches off (none:
	// no section); mechRuns its runs.
	mechs    []mechanism
	mechRuns []*mechRun
}

func main() {
	if spec := os.Getenv(pollerEnv); spec != "" {
		os.Exit(runPollerChild(spec))
	}
	os.Exit(run())
}

// options are the command line's flags.
type options struct {
	quick, jsonOut, ceilingPipe, kafkaMem bool
	out, png, only, runs                  string
	noise, noisy                          float64
	repeats, retries, mechRounds          int
	root, cdcPkg, pprofDir, receiveBuffer string
	mechanisms                            string
	// outSet, pngSet: -out, -png were given (an empty value then means
	// none; left out, the report goes to a temporary file).
	outSet, pngSet bool
}

// parseFlags reads the command line.
func parseFlags() options {
	var o options
	flag.BoolVar(&o.quick, "quick", false, "smaller run (≤ 3 minutes): 50,000 catch-up messages once, 6 s paced runs, a 200,000-row transaction (the 50 MiB message is the same)")
	flag.BoolVar(&o.jsonOut, "json", false, "print the figures as one JSON object on the last line of stdout")
	flag.StringVar(&o.out, "out", "", "markdown report to write: a file, relative to the repository root unless absolute (BENCHMARKS.md regenerates the committed one), - for stdout, '' for none (default: a new temporary file, named in the output)")
	flag.StringVar(&o.png, "png", "", "chart to write (relative to the repository root unless absolute), '' for none (default: beside the report, with .png for its extension; bench/results.png for BENCHMARKS.md; none with -out -)")
	flag.StringVar(&o.only, "only", "", "comma-separated systems (or globs, e.g. walpost_*) to run: "+systemNames()+
		"; or a preset: @bar (the performance bar's rows: catch-up, fan-out, CPU per message and Kafka p99 at 1,000 tx/s, one 50 MiB message; @issue16 is the same), "+
		"@mechanisms (only the low-level mechanisms switched off)")
	flag.StringVar(&o.mechanisms, "mechanisms", "", "low-level mechanisms to switch off in turn, in a section of their own: all, none, or a comma-separated list of "+mechanismNames()+
		" (default: all in a full run without -only or with -only @mechanisms, none otherwise)")
	flag.IntVar(&o.mechRounds, "mechanism-rounds", -1, "rounds of the mechanisms section's catch-ups, each with every mechanism on and each switched off; its 1,000 tx/s runs take half as many, at least one (default 4, 1 with -quick)")
	flag.StringVar(&o.runs, "runs", "", "comma-separated workloads to run: "+strings.Join(allWorkloads, ","))
	flag.Float64Var(&o.noise, "noise", 0, "unrelated single-row writes per second on another table during every run")
	flag.BoolVar(&o.ceilingPipe, "ceiling-pipe", false, "catch-up: pg_recvlogical writes to a pipe the bench reads, not to a file it tails")
	flag.IntVar(&o.repeats, "catchup-repeats", -1, "how often each non-polling system runs the catch-up workload, taking turns; the median run is reported (default 5, 1 with -quick)")
	flag.IntVar(&o.retries, "retries", -1, "runs disturbed by other work on the machine (other load above -noisy) are run again up to this many times, keeping the least disturbed (default 3, 0 with -quick)")
	flag.Float64Var(&o.noisy, "noisy", 0.3, "other load, in cores, above which a run counts as disturbed")
	flag.BoolVar(&o.kafkaMem, "kafka-mem", false, "keep the kfake broker's log in memory instead of on disk")
	flag.StringVar(&o.root, "root", "", "repository root, where ./cmd/cdc is (default: found from the working directory up, by its go.mod)")
	flag.StringVar(&o.cdcPkg, "cdc-pkg", "./cmd/cdc", "package of the relay binary to build and measure")
	flag.StringVar(&tracingRatio, "tracing", "off", "walpost's runs with tracing: off, or on with this sample ratio (1: a publish span per message, 0.01: one in a hundred), exported over OTLP/HTTP to a receiver in the bench that discards them; compare with a run without")
	flag.StringVar(&kafkaSinkExtra, "kafka-sink-extra", "", "keys added to the kafka sink's settings of walpost's runs, e.g. 'exactly_once: true', to compare settings")
	flag.StringVar(&o.receiveBuffer, "receive-buffer", "", "postgres.receive_buffer of walpost's runs (auto, kernel or bytes; default: not set, i.e. the relay's default, auto), to compare settings")
	flag.StringVar(&o.pprofDir, "pprof", "", "directory for CPU profiles of walpost over each paced run and of both instances over the idle-fleet window (relative to the repository root unless absolute; http.pprof; read them with go tool pprof)")
	flag.Parse()
	flag.Visit(func(f *flag.Flag) {
		o.outSet = o.outSet || f.Name == "out"
		o.pngSet = o.pngSet || f.Name == "png"
	})
	return o
}

// resolvePaths finds the repository root when -root is not given, and
// makes relative -out, -png and -pprof paths relative to it.
func (o *options) resolvePaths() error {
	if o.root == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		if o.root, err = findRoot(wd); err != nil {
			return err
		}
	}
	abs := func(p string) string {
		if p == "" || p == "-" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(o.root, p)
	}
	o.out, o.png, o.pprofDir = abs(o.out), abs(o.png), abs(o.pprofDir)
	return nil
}

// rootModule is the product's module path, in the go.mod findRoot looks for.
const rootModule = "github.com/walpost/walpost"

// findRoot returns the first directory from dir upwards whose go.mod is
// the product's (module github.com/walpost/walpost, not the bench's own).
func findRoot(dir string) (string, error) {
	for d := dir; ; {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && goModModule(string(b)) == rootModule {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", fmt.Errorf("no go.mod of module %s in %s or above it: run the bench inside the repository, or give -root", rootModule, dir)
		}
		d = up
	}
}

// goModModule returns the module path a go.mod declares ("" if none).
func goModModule(gomod string) string {
	for _, l := range strings.Split(gomod, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// run is the command: it reads the flags, runs each selected workload on
// each selected system and writes the report; it returns the exit code.
func run() int {
	o := parseFlags()
	if err := o.resolvePaths(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	systems, workloads, pairs, err := selectRuns(o.only, o.runs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	mechs, err := selectMechanisms(o.mechanisms, o.only, o.quick)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	stopTracing, err := startTracingSink()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	defer stopTracing()
	b, err := newBench(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	b.pairs, b.mechs = pairs, mechs
	b.dropSwitchesFromEnv()
	if err := b.setup(o.root, systems); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		b.teardown()
		return 1
	}
	ctx := context.Background()
	if b.p.Noise > 0 {
		stopNoise := b.startNoise(ctx)
		defer stopNoise()
	}
	for _, w := range workloads {
		b.runWorkload(ctx, w, systems)
	}
	b.runMechanisms(ctx, workloads)
	elapsed := time.Since(b.started)
	if steal, ok := readSteal(); ok && b.stealOK {
		b.machine.Steal = stealShare(steal-b.stealStart, elapsed, b.machine.CPUs)
		b.logf("steal: %s", b.machine.Steal)
	}
	b.teardown()

	if len(b.results) == 0 {
		workloads = nil // only the mechanisms section ran: no main tables
	}
	rep := newReport(b.machine, b.p, b.quick, systems, workloads, b.results, elapsed)
	rep.KafkaMem = b.kafkaMem
	rep.Mechanisms, rep.MechRuns = b.mechs, b.mechRuns
	if err := b.writeReport(rep, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}

// newBench is the invocation the flags describe, before its setup.
func newBench(o options) (*bench, error) {
	b := &bench{p: paramsFor(o.quick), quick: o.quick, log: os.Stderr, started: time.Now()}
	b.stealStart, b.stealOK = readSteal()
	b.p.Noise = o.noise
	b.p.Noisy = o.noisy
	switch {
	case o.retries >= 0:
		b.p.Retries = o.retries
	case o.quick:
		b.p.Retries = 0
	default:
		b.p.Retries = 3
	}
	if o.repeats >= 1 {
		b.p.CatchUpRepeats = o.repeats
	}
	if o.mechRounds >= 1 {
		b.p.MechRounds = o.mechRounds
	}
	b.ceilingPipe = o.ceilingPipe
	b.cdcPkg, b.kafkaMem, b.receiveBuffer = o.cdcPkg, o.kafkaMem, o.receiveBuffer
	if o.pprofDir != "" {
		if err := os.MkdirAll(o.pprofDir, 0o755); err != nil {
			return nil, err
		}
		b.pprofDir = o.pprofDir
	}
	return b, nil
}

// runWorkload runs workload w on each of systems that runs it and adds one
// result per system to b.results. Catch-up is short and its ratios swing
// with the machine: it is run several times, the systems taking turns, and
// the median run of each is reported with the range.
func (b *bench) runWorkload(ctx context.Context, w string, systems []system) {
	reps := 1
	if w == wCatchUp {
		reps = max(1, b.p.CatchUpRepeats)
	}
	runs := map[string][]*runResult{}
	for rep := range reps {
		for _, s := range systems {
			if w == wBigTx && s.Kind == "poll" {
				continue // the big transaction measures the relay's memory
			}
			if !b.runs(s, w) {
				continue
			}
			if rep > 0 && s.Kind == "poll" {
				continue // bound by their timers, or capped: once is enough
			}
			if missing := b.missingSink(s); missing != "" {
				runs[s.Name] = append(runs[s.Name], &runResult{System: s.Name, Workload: w,
					Err: "n/a: " + b.cdcPkg + " does not register the " + missing + " sink"})
				continue
			}
			runs[s.Name] = append(runs[s.Name], b.runQuietly(ctx, s, w))
		}
	}
	for _, s := range systems {
		if rs := runs[s.Name]; len(rs) > 0 {
			b.results = append(b.results, medianRun(rs))
		}
	}
}

// runs reports whether system s runs workload w: its Only, the
// workload's workloadSystems and the preset's pairs allow it.
func (b *bench) runs(s system, w string) bool {
	if s.Only != nil && !slices.Contains(s.Only, w) {
		return false
	}
	if only, ok := workloadSystems[w]; ok && !slices.Contains(only, s.Name) {
		return false
	}
	return b.pairs == nil || slices.Contains(b.pairs[w], s.Name)
}

// missingSink is a sink kind system s needs that the cdc binary does not
// register ("" when it has them all).
func (b *bench) missingSink(s system) string {
	for _, k := range sinkKinds(s.Sink) {
		if _, extra := sinkPkgs[k]; extra && !b.sinks[k] {
			return k
		}
	}
	return ""
}

// selectRuns applies -only and -runs: the systems, the workloads, and
// for a preset (-only @name) the systems each workload runs.
func selectRuns(only, runs string) ([]system, []string, map[string][]string, error) {
	name := strings.TrimSpace(only)
	preset, ok := presets[name]
	if !ok {
		if strings.HasPrefix(name, "@") {
			var names []string
			for k := range presets {
				names = append(names, k)
			}
			slices.Sort(names)
			return nil, nil, nil, fmt.Errorf("-only: unknown preset %q (presets: %s)", name, strings.Join(names, ","))
		}
		systems, err := selectSystems(only)
		if err != nil {
			return nil, nil, nil, err
		}
		workloads, err := selectWorkloads(runs)
		return systems, workloads, nil, err
	}
	var names, ws []string
	for _, w := range allWorkloads {
		if _, ok := preset[w]; ok {
			ws = append(ws, w)
		}
	}
	var systems []system
	var err error
	for _, s := range allSystems {
		for _, w := range ws {
			if slices.Contains(preset[w], s.Name) {
				names = append(names, s.Name)
				break
			}
		}
	}
	if len(names) > 0 {
		if systems, err = selectSystems(strings.Join(names, ",")); err != nil {
			return nil, nil, nil, err
		}
	}
	workloads := ws
	if strings.TrimSpace(runs) != "" {
		asked, err := selectWorkloads(runs)
		if err != nil {
			return nil, nil, nil, err
		}
		workloads = slices.DeleteFunc(asked, func(w string) bool { return !slices.Contains(ws, w) })
	}
	return systems, workloads, preset, nil
}

// writeReport prints the summary to stdout, writes the markdown report
// (with bench/NOTES.md appended) and the chart where reportPaths says,
// prints where they went, and with -json prints the figures on the last
// line of stdout.
func (b *bench) writeReport(rep *report, o options) error {
	mdPath, pngPath, err := reportPaths(o)
	if err != nil {
		return err
	}
	if len(rep.Results) == 0 {
		pngPath = "" // nothing to chart: only the mechanisms section ran
	}
	md := rep.markdown(relPNG(mdPath, pngPath))
	// Notes kept by hand (micro-benchmarks, what each optimisation
	// bought, known gaps) follow the generated part, so that re-running
	// the tool keeps them.
	if notes, err := os.ReadFile(filepath.Join(o.root, notesFile)); err == nil {
		md += "\n" + string(notes)
	} else if !os.IsNotExist(err) {
		return err
	}
	fmt.Println(rep.summary())
	switch mdPath {
	case "":
		fmt.Println("report: none (-out '')")
	case "-":
		fmt.Println(md)
	default:
		if err := os.WriteFile(mdPath, []byte(md), 0o644); err != nil {
			return err
		}
		b.logf("wrote %s", mdPath)
		fmt.Println("report: " + mdPath)
	}
	if pngPath != "" {
		if err := writeChart(pngPath, rep); err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		b.logf("wrote %s", pngPath)
		fmt.Println("chart: " + pngPath)
	}
	if o.jsonOut {
		fmt.Println(rep.jsonLine())
	}
	return nil
}

// reportPaths says where the report and the chart go: "" for none, "-"
// (report only) for stdout. Unless -out names a file, the report goes to
// a new temporary file (created here), so that a run changes nothing in
// the repository; unless -png is given, the chart goes beside the report
// with the extension .png, except for the committed report (BENCHMARKS.md
// at -root), whose chart is bench/results.png.
func reportPaths(o options) (md, png string, err error) {
	md = o.out
	if !o.outSet {
		f, err := os.CreateTemp("", "walpost-bench-*.md")
		if err != nil {
			return "", "", err
		}
		md = f.Name()
		f.Close()
	}
	if o.pngSet {
		return md, o.png, nil
	}
	return md, defaultPNG(o.root, md), nil
}

// defaultPNG is the chart's path for report md when -png is not given.
func defaultPNG(root, md string) string {
	if md == "" || md == "-" {
		return ""
	}
	if sameFile(md, filepath.Join(root, "BENCHMARKS.md")) {
		return filepath.Join(root, "bench", "results.png")
	}
	return strings.TrimSuffix(md, filepath.Ext(md)) + ".png"
}

// sameFile reports whether paths a and b name the same file (compared
// as absolute, cleaned paths: neither needs to exist).
func sameFile(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	ab, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == ab
}

func systemNames() string {
	var n []string
	for _, s := range allSystems {
		n = append(n, s.Name)
	}
	return strings.Join(n, ",")
}

// selectSystems applies -only: names or path.Match globs.
func selectSystems(only string) ([]system, error) {
	if strings.TrimSpace(only) == "" {
		return allSystems, nil
	}
	var out []system
	pats := strings.Split(only, ",")
	for _, p := range pats {
		p = strings.TrimSpace(p)
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("-only: bad pattern %q", p)
		}
		found := false
		for _, s := range allSystems {
			if ok, _ := path.Match(p, s.Name); ok {
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("-only: %q matches no system (systems: %s)", p, systemNames())
		}
	}
	for _, s := range allSystems {
		for _, p := range pats {
			if ok, _ := path.Match(strings.TrimSpace(p), s.Name); ok {
				out = append(out, s)
				break
			}
		}
	}
	return out, nil
}

func selectWorkloads(runs string) ([]string, error) {
	if strings.TrimSpace(runs) == "" {
		return allWorkloads, nil
	}
	var out []string
	for _, w := range allWorkloads {
		for _, r := range strings.Split(runs, ",") {
			if strings.TrimSpace(r) == w {
				out = append(out, w)
			}
		}
	}
	for _, r := range strings.Split(runs, ",") {
		ok := false
		for _, w := range allWorkloads {
			ok = ok || strings.TrimSpace(r) == w
		}
		if !ok {
			return nil, fmt.Errorf("-runs: unknown workload %q (one of %s)", r, strings.Join(allWorkloads, ","))
		}
	}
	return out, nil
}

func relPNG(md, png string) string {
	if md == "" || png == "" {
		return ""
	}
	r, err := filepath.Rel(filepath.Dir(md), png)
	if err != nil {
		return png
	}
	return filepath.ToSlash(r)
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "[%6.1fs] "+format+"\n", append([]any{time.Since(b.started).Seconds()}, args...)...)
}

func (b *bench) setup(root string, systems []system) error {
	var err error
	b.tmp, err = os.MkdirTemp("", "walpost-bench-")
	if err != nil {
		return err
	}
	needCDC := len(b.mechs) > 0
	for _, s := range systems {
		needCDC = needCDC || s.Kind == "walpost" || s.Kind == kindWebhook || s.Kind == kindIdle
	}
	if needCDC {
		b.logf("building %s", b.cdcPkg)
		b.cdc, b.sinks, err = buildCDC(root, b.cdcPkg, b.tmp)
		if err != nil {
			return err
		}
		b.logf("cdc built; kafka sink: %v, nats sink: %v, rabbitmq sink: %v", b.sinks["kafka"], b.sinks["nats"], b.sinks["rabbitmq"])
	}
	b.logf("starting PostgreSQL (pgtest, fsync=off, synchronous_commit=on)")
	b.cluster, err = pgtest.Start(pgtest.Options{Fsync: false})
	if err != nil {
		return err
	}
	b.url = b.cluster.URL("postgres")
	ctx := context.Background()
	b.conn, err = pgx.Connect(ctx, b.url)
	if err != nil {
		return err
	}
	if _, err := b.conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pgcrypto"); err != nil {
		b.logf("pgcrypto: %v (gen_random_uuid is built in from PG13)", err)
	}
	b.machine = readMachine(ctx, b.conn)
	b.machine.Fdatasync = measureFdatasync(b.tmp, 2*time.Second)
	b.logf("disk fdatasync: %s", b.machine.Fdatasync)
	b.logf("PostgreSQL %s on 127.0.0.1:%d", b.machine.Postgres, b.cluster.Port)
	return nil
}

func (b *bench) teardown() {
	for i := len(b.closers) - 1; i >= 0; i-- {
		b.closers[i]()
	}
	b.closers = nil
	if b.conn != nil {
		b.conn.Close(context.Background())
	}
	if b.cluster != nil {
		if err := b.cluster.Close(); err != nil {
			b.logf("stopping PostgreSQL: %v", err)
		}
		b.cluster = nil
	}
	if b.tmp != "" {
		os.RemoveAll(b.tmp)
	}
}

// startNoise writes to an unrelated table at b.p.Noise rows per second
// until the returned function is called.
func (b *bench) startNoise(ctx context.Context) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := pgx.Connect(ctx, b.url)
		if err != nil {
			b.logf("noise: %v", err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS bench_noise (id bigserial PRIMARY KEY, n int, v text)"); err != nil {
			b.logf("noise: %v", err)
			return
		}
		interval := time.Duration(float64(time.Second) / b.p.Noise)
		t := time.NewTicker(interval)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if _, err := conn.Exec(ctx, "INSERT INTO bench_noise (n, v) VALUES ($1, $2)", i, pad); err != nil && ctx.Err() == nil {
				b.logf("noise: %v", err)
				return
			}
		}
	}()
	b.logf("unrelated write load: %.0f rows/s on bench_noise", b.p.Noise)
	return func() { cancel(); <-done }
}
