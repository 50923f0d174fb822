package main

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// runResult is one system under one workload.
type runResult struct {
	System   string `json:"system"`
	Workload string `json:"workload"`
	// Produced is the messages committed for the run; Delivered those the
	// system got through (acknowledged, read, or marked sent) in the window.
	Produced  int64 `json:"produced"`
	Delivered int64 `json:"delivered"`
	// Seconds: catch-up and big transaction, from starting the system to
	// its last message (or to the cap, when Capped); paced, the producing
	// window.
	Seconds  float64 `json:"seconds"`
	Capped   bool    `json:"capped,omitempty"`
	MsgsPerS float64 `json:"msgs_per_s"`
	// Latency (paced runs): commit → ack (walpost, from its histogram),
	// commit → read (pg_recvlogical), insert → publish (polling relays).
	Hist *Hist   `json:"-"`
	P50  float64 `json:"p50_ms"`
	P95  float64 `json:"p95_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_bucket_ms"`
	// CPU seconds in the window: the system's own process, and the whole
	// PostgreSQL server (walsender, backends, background workers).
	RelayCPU  float64 `json:"relay_cpu_s"`
	ServerCPU float64 `json:"server_cpu_s"`
	// BrokerCPU is the CPU seconds the machine's NATS or RabbitMQ server
	// (brokerComms) used in the window; it is not counted in OtherCores.
	BrokerCPU float64 `json:"broker_cpu_s,omitempty"`
	// OtherCores is the CPU that processes outside the run (other work on
	// the machine) used during the window, in cores: a noise indicator.
	OtherCores float64 `json:"other_cores"`
	// CtxSwitches is the context switches of the system's process (all
	// its threads) in the window.
	CtxSwitches int64 `json:"ctx_switches"`
	// Attempts is how many times the run was made (more than one when
	// other work on the machine disturbed it; the least disturbed is kept).
	Attempts int `json:"attempts"`
	// Repeats is how many successful runs this median run was chosen
	// from (0 or 1: a single run), with the range of their rates.
	Repeats          int     `json:"repeats,omitempty"`
	RateMin, RateMax float64 `json:"-"`
	PeakRSSMB        float64 `json:"peak_rss_mb"`
	// StandbyCPU and StandbyRSSMB (idle fleet): the standby instance's.
	StandbyCPU   float64    `json:"standby_cpu_s,omitempty"`
	StandbyRSSMB float64    `json:"standby_rss_mb,omitempty"`
	Queries      int64      `json:"queries,omitempty"`
	QPS          float64    `json:"queries_per_s,omitempty"`
	Load         *tableLoad `json:"table,omitempty"`
	Backlog      int64      `json:"backlog,omitempty"` // paced: produced but not delivered when the run ended
	// MsgBytes (bigmsg): the one message's payload, in bytes of its JSON
	// text (as pgoutput sends it).
	MsgBytes int64  `json:"msg_bytes,omitempty"`
	Err      string `json:"error,omitempty"`
}

func (r *runResult) ok() bool { return r.Err == "" }

// medianRun returns the run with the median rate among rs's successful
// ones (the slower of the middle two for an even count), with the range
// of their rates; the first run when none succeeded.
func medianRun(rs []*runResult) *runResult {
	var ok []*runResult
	for _, r := range rs {
		if r.ok() {
			ok = append(ok, r)
		}
	}
	if len(ok) == 0 {
		return rs[0]
	}
	slices.SortFunc(ok, func(a, b *runResult) int { return cmp.Compare(a.MsgsPerS, b.MsgsPerS) })
	m := ok[(len(ok)-1)/2]
	if len(ok) > 1 {
		m.Repeats, m.RateMin, m.RateMax = len(ok), ok[0].MsgsPerS, ok[len(ok)-1].MsgsPerS
	}
	return m
}

// finish derives the rates and percentiles.
func (r *runResult) finish() {
	if r.Seconds > 0 {
		r.MsgsPerS = float64(r.Delivered) / r.Seconds
	}
	r.P50, r.P95, r.P99, r.Max = math.NaN(), math.NaN(), math.NaN(), math.NaN()
	if r.Hist != nil && r.Hist.Count() > 0 {
		r.P50 = r.Hist.Quantile(0.50) * 1000
		r.P95 = r.Hist.Quantile(0.95) * 1000
		r.P99 = r.Hist.Quantile(0.99) * 1000
		r.Max = r.Hist.MaxBucket() * 1000
	}
}

// per100k returns CPU seconds per 100,000 delivered messages.
func per100k(cpu float64, n int64) float64 {
	if n <= 0 {
		return math.NaN()
	}
	return cpu / float64(n) * 1e5
}

// per1k returns a count per 1,000 delivered messages.
func per1k(n, msgs int64) float64 {
	if msgs <= 0 {
		return math.NaN()
	}
	return float64(n) / float64(msgs) * 1e3
}

// workload says what a workload commits.
type workload struct {
	backlog bool    // committed before the system starts
	total   int     // backlog: rows
	txRows  int     // rows per transaction
	rate    float64 // paced: rows per second
	bigMsg  int     // backlog of one row whose payload holds a blob of this many bytes
}

func (b *bench) workload(w string) workload {
	switch w {
	case wCatchUp:
		return workload{backlog: true, total: b.p.CatchUpN, txRows: b.p.TxRows}
	case wBigTx:
		return workload{backlog: true, total: b.p.BigN, txRows: b.p.BigN}
	case wPaced1k:
		return workload{rate: 1000, txRows: 1}
	case wPaced2k:
		return workload{rate: 2000, txRows: 100}
	case wBigMsg:
		return workload{backlog: true, total: 1, txRows: 1, bigMsg: b.p.BigMsgBytes}
	}
	panic("unknown workload " + w)
}

func shortName(s string) string {
	return strings.NewReplacer("walpost_", "wp_", "poll_", "p_", "classic", "cl", "ceiling", "ceil").Replace(s)
}

// runQuietly waits (briefly, not with -quick) for the machine to be quiet, runs, and runs
// again up to p.Retries times while other work on the machine used more
// than p.Noisy cores during the run; it keeps the least disturbed run.
func (b *bench) runQuietly(ctx context.Context, s system, w string) *runResult {
	var best *runResult
	for attempt := 1; ; attempt++ {
		if !b.quick { // -quick keeps to its time budget
			if load, ok := b.waitQuiet(20 * time.Second); !ok {
				b.logf("  the machine is busy (other load %.2f cores); going on", load)
			}
		}
		r := b.runOne(ctx, s, w)
		if best == nil || (r.ok() && (!best.ok() || r.OtherCores < best.OtherCores)) {
			best = r
		}
		best.Attempts = attempt
		// A classic polling relay's rate is set by its timer, not by the
		// CPU it gets: other work does not change its figures.
		timerBound := s.Kind == "poll" && s.Poll.Mode == "classic"
		if !r.ok() || r.OtherCores <= b.p.Noisy || attempt > b.p.Retries || timerBound {
			return best
		}
		b.logf("  other load %.2f cores during the run (over %.2f): running it again", r.OtherCores, b.p.Noisy)
	}
}

// waitQuiet waits up to max until, over 300 ms, processes other
// than PostgreSQL and the bench used less than p.Noisy cores.
func (b *bench) waitQuiet(max time.Duration) (float64, bool) {
	deadline := time.Now().Add(max)
	for {
		s := b.snap()
		time.Sleep(300 * time.Millisecond)
		_, other := b.since(s, 0)
		if other <= b.p.Noisy {
			return other, true
		}
		if time.Now().After(deadline) {
			return other, false
		}
	}
}

func (b *bench) runOne(ctx context.Context, s system, w string) *runResult {
	r := &runResult{System: s.Name, Workload: w}
	n := newNames(shortName(s.Name), w)
	b.logf("%s / %s: starting (table %s)", s.tag(), w, n.Table)
	// Write back what earlier runs left dirty (PostgreSQL's pages under
	// fsync=off, output files) now, so that it does not land in this run's
	// fsyncs: on ext4 an fdatasync may wait for other files' dirty data.
	syscall.Sync()
	var err error
	switch s.Kind {
	case "decode":
		err = b.runDecode(ctx, b.workload(w), n, r)
	case "ceiling":
		err = b.runCeiling(ctx, b.workload(w), n, r)
	case "walpost":
		err = b.runWalpost(ctx, s, b.workload(w), n, r)
	case "poll":
		err = b.runPoll(ctx, s, b.workload(w), n, r)
	case kindWebhook:
		err = b.runWebhook(ctx, s, n, r)
	case kindIdle:
		err = b.runIdle(ctx, r)
	}
	if cerr := dropAll(ctx, b.conn, n); cerr != nil {
		b.logf("cleanup of %s: %v", n.Table, cerr)
	}
	r.finish()
	if err != nil {
		r.Err = err.Error()
		if isSkipped(r.Err) {
			b.logf("%s / %s: %v", s.tag(), w, err)
		} else {
			b.logf("%s / %s: FAILED: %v", s.tag(), w, err)
		}
		return r
	}
	b.logf("%s / %s: %d/%d messages in %.2fs = %.0f msgs/s; p50 %.2f p99 %.2f max≤%.1f ms; cpu %.2fs (pg %.2fs, others %.2f cores); rss %.1f MB; %d context switches",
		s.tag(), w, r.Delivered, r.Produced, r.Seconds, r.MsgsPerS, r.P50, r.P99, r.Max, r.RelayCPU, r.ServerCPU, r.OtherCores, r.PeakRSSMB, r.CtxSwitches)
	return r
}

// produce commits the workload's rows (backlog) or paces them (paced), and
// returns the WAL position after the last commit.
func (b *bench) produce(ctx context.Context, wl workload, table string, r *runResult) error {
	if wl.bigMsg > 0 {
		t0 := time.Now()
		size, err := insertBigMessage(ctx, b.conn, table, wl.bigMsg)
		if err != nil {
			return fmt.Errorf("inserting the big message: %w", err)
		}
		r.Produced, r.MsgBytes = 1, size
		b.logf("  one message of %d bytes (payload as JSON text) committed in %.1fs", size, time.Since(t0).Seconds())
		return nil
	}
	if wl.backlog {
		t0 := time.Now()
		if err := insertBacklog(ctx, b.conn, table, wl.total, wl.txRows); err != nil {
			return fmt.Errorf("inserting backlog: %w", err)
		}
		r.Produced = int64(wl.total)
		b.logf("  %d rows committed in %.1fs", wl.total, time.Since(t0).Seconds())
		return nil
	}
	n, d, err := pace(ctx, b.conn, table, wl.rate, wl.txRows, b.p.PacedDur)
	r.Produced, r.Seconds = int64(n), d.Seconds()
	if err != nil {
		return fmt.Errorf("producing: %w", err)
	}
	if achieved := float64(n) / d.Seconds(); achieved < wl.rate*0.95 {
		b.logf("  producer fell behind: %.0f rows/s of %.0f", achieved, wl.rate)
	}
	return nil
}

// waitUntil polls cond every 5 ms.
func waitUntil(timeout time.Duration, cond func() bool, alive func() error) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if alive != nil {
			if err := alive(); err != nil {
				return err
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v", timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// runWalpost measures the cdc binary with sink s.Sink under workload wl.
func (b *bench) runWalpost(ctx context.Context, s system, wl workload, n names, r *runResult) error {
	wr, err := b.prepareWalpost(ctx, s.Sink, n)
	if err != nil {
		return err
	}
	defer wr.close()
	wr.env = s.Env
	if wl.backlog {
		return b.walpostBacklog(ctx, wr, wl, n, r)
	}
	return b.walpostPaced(ctx, s, wr, wl, n, r)
}

// walpostBacklog commits the backlog, then starts the relay and times it
// until the slot has confirmed the WAL position after the last commit.
func (b *bench) walpostBacklog(ctx context.Context, wr *walpostRun, wl workload, n names, r *runResult) error {
	if err := b.produce(ctx, wl, n.Qualified(), r); err != nil {
		return err
	}
	end, err := currentLSN(ctx, b.conn)
	if err != nil {
		return err
	}
	snap := b.snap()
	broker0 := commCPU(brokerComms[wr.sink]...)
	t0 := time.Now()
	p, err := b.startWalpost(wr)
	if err != nil {
		return err
	}
	defer p.kill()
	at, err := waitConfirmed(ctx, b.conn, n.Slot, end, b.p.RelayLimit, p.alive)
	if err != nil {
		return err
	}
	r.Seconds = at.Sub(t0).Seconds()
	r.RelayCPU = procCPU(p.cmd.Process.Pid)
	r.CtxSwitches = ctxSwitches(p.cmd.Process.Pid)
	b.logf("  relay: %s", p.streamingInfo())
	if len(brokerComms[wr.sink]) > 0 {
		r.BrokerCPU = commCPU(brokerComms[wr.sink]...) - broker0
	}
	r.ServerCPU, r.OtherCores = b.since(snap, r.RelayCPU)
	if el := time.Since(snap.at).Seconds(); r.BrokerCPU > 0 && el > 0 {
		r.OtherCores = max(r.OtherCores-r.BrokerCPU/el, 0)
		b.logf("  %s server CPU %.2fs (not counted as other load)", wr.sink, r.BrokerCPU)
	}
	if _, pub, err := p.scrape(); err == nil {
		r.Delivered = int64(pub)
	}
	_, r.PeakRSSMB, err = p.stop()
	if err != nil {
		return err
	}
	if err := p.switchedOff(wr.env); err != nil {
		return err
	}
	if r.Delivered != r.Produced {
		return fmt.Errorf("slot confirmed, but the relay counted %d messages published of %d", r.Delivered, r.Produced)
	}
	if wr.stored != nil {
		// The broker's own count, after the timed window: a resent
		// message may be stored twice (RabbitMQ), never less than once.
		held, err := wr.stored()
		if err != nil {
			return fmt.Errorf("counting what the %s sink's destination holds: %w", wr.sink, err)
		}
		if held < r.Produced {
			return fmt.Errorf("slot confirmed, but the %s destination holds %d messages of %d", wr.sink, held, r.Produced)
		}
		b.logf("  the %s destination holds %d messages", wr.sink, held)
	}
	return nil
}

// walpostPaced starts the relay, paces the workload into the table while it
// runs and waits until the slot has confirmed the last commit; latency and
// the messages delivered are the difference of the relay's metrics scraped
// before and after. With -pprof it takes a CPU profile of the relay for the
// paced run's duration.
func (b *bench) walpostPaced(ctx context.Context, s system, wr *walpostRun, wl workload, n names, r *runResult) error {
	p, err := b.startWalpost(wr)
	if err != nil {
		return err
	}
	defer p.kill()
	if err := p.waitReady(30 * time.Second); err != nil {
		return err
	}
	h0, pub0, err := p.scrape()
	if err != nil {
		return err
	}
	var profiled func() error
	if b.pprofDir != "" && len(s.Env) == 0 { // the main rows only
		path := filepath.Join(b.pprofDir, s.Name+"_"+r.Workload+".pprof")
		profiled = p.cpuProfile(b.p.PacedDur, path)
		defer func() {
			if err := profiled(); err != nil {
				b.logf("  CPU profile %s: %v", path, err)
			} else {
				b.logf("  CPU profile of the paced run: %s (go tool pprof -top %s)", path, path)
			}
		}()
	}
	snap, cpu0, cs0 := b.snap(), procCPU(p.cmd.Process.Pid), ctxSwitches(p.cmd.Process.Pid)
	if err := b.produce(ctx, wl, n.Qualified(), r); err != nil {
		return err
	}
	end, err := currentLSN(ctx, b.conn)
	if err != nil {
		return err
	}
	if _, err := waitConfirmed(ctx, b.conn, n.Slot, end, time.Minute, p.alive); err != nil {
		return err
	}
	r.RelayCPU = procCPU(p.cmd.Process.Pid) - cpu0
	r.CtxSwitches = ctxSwitches(p.cmd.Process.Pid) - cs0
	r.ServerCPU, r.OtherCores = b.since(snap, r.RelayCPU)
	h1, pub1, err := p.scrape()
	if err != nil {
		return err
	}
	r.Delivered = int64(pub1 - pub0)
	if r.Hist, err = h1.Sub(h0); err != nil {
		return err
	}
	if _, r.PeakRSSMB, err = p.stop(); err != nil {
		return err
	}
	return p.switchedOff(wr.env)
}

// kill ends the process if it is still running (error paths).
func (p *cdcProc) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// decodeQuery decodes everything the slot holds in-server, with the
// options pg_recvlogical and walpost pass, without consuming it; it counts
// the changes and, of them, the Inserts (pgoutput message type 'I').
const decodeQuery = `SELECT count(*), count(*) FILTER (WHERE get_byte(data, 0) = 73)
	FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', $2)`

// runDecode times PostgreSQL decoding the backlog in-server: a slot made
// before the backlog is committed, then one peek of all its changes, so
// that the query decodes exactly the backlog, as the readers do, but with
// no client and no socket. Only the server's CPU is measured (there is no
// relay process).
func (b *bench) runDecode(ctx context.Context, wl workload, n names, r *runResult) error {
	if !wl.backlog {
		return fmt.Errorf("the in-server decode runs on a backlog only")
	}
	if err := createOutbox(ctx, b.conn, n, false); err != nil {
		return err
	}
	if err := createReplication(ctx, b.conn, n); err != nil {
		return err
	}
	if err := b.produce(ctx, wl, n.Qualified(), r); err != nil {
		return err
	}
	snap := b.snap()
	t0 := time.Now()
	var changes, inserts int64
	if err := b.conn.QueryRow(ctx, decodeQuery, n.Slot, n.Publication).Scan(&changes, &inserts); err != nil {
		return fmt.Errorf("peeking the slot: %w", err)
	}
	r.Seconds = time.Since(t0).Seconds()
	r.Delivered = inserts
	r.ServerCPU, r.OtherCores = b.since(snap, 0)
	b.logf("  %d changes decoded, %d of them Inserts", changes, inserts)
	if inserts != r.Produced {
		return fmt.Errorf("the slot decoded %d Inserts, not the %d committed", inserts, r.Produced)
	}
	return nil
}

func (b *bench) runCeiling(ctx context.Context, wl workload, n names, r *runResult) error {
	if err := createOutbox(ctx, b.conn, n, false); err != nil {
		return err
	}
	if err := createReplication(ctx, b.conn, n); err != nil {
		return err
	}
	bin := b.cluster.Bin("pg_recvlogical")
	if wl.backlog {
		if err := b.produce(ctx, wl, n.Qualified(), r); err != nil {
			return err
		}
		snap := b.snap()
		t0 := time.Now()
		rl, err := startRecvlogical(bin, b.cluster.Port, n, r.Produced, b.ceilingFile(n))
		if err != nil {
			return err
		}
		at, err := rl.wait(b.p.RelayLimit)
		if err != nil {
			rl.stop()
			return err
		}
		r.Seconds = at.Sub(t0).Seconds()
		r.Delivered = rl.inserts.Load()
		r.RelayCPU = procCPU(rl.cmd.Process.Pid)
		r.CtxSwitches = ctxSwitches(rl.cmd.Process.Pid)
		r.ServerCPU, r.OtherCores = b.since(snap, r.RelayCPU)
		_, r.PeakRSSMB, err = rl.stop()
		if f := b.ceilingFile(n); f != "" {
			os.Remove(f)
		}
		return err
	}
	rl, err := startRecvlogical(bin, b.cluster.Port, n, -1, "")
	if err != nil {
		return err
	}
	if err := waitSlotActive(ctx, b.conn, n.Slot, 30*time.Second, rl.alive); err != nil {
		rl.stop()
		return err
	}
	snap, cpu0, cs0 := b.snap(), procCPU(rl.cmd.Process.Pid), ctxSwitches(rl.cmd.Process.Pid)
	if err := b.produce(ctx, wl, n.Qualified(), r); err != nil {
		rl.stop()
		return err
	}
	if err := waitUntil(time.Minute, func() bool { return rl.inserts.Load() >= r.Produced }, rl.alive); err != nil {
		rl.stop()
		return fmt.Errorf("pg_recvlogical read %d of %d: %w", rl.inserts.Load(), r.Produced, err)
	}
	r.RelayCPU = procCPU(rl.cmd.Process.Pid) - cpu0
	r.CtxSwitches = ctxSwitches(rl.cmd.Process.Pid) - cs0
	r.ServerCPU, r.OtherCores = b.since(snap, r.RelayCPU)
	r.Delivered = rl.inserts.Load()
	r.Hist = rl.Hist()
	_, r.PeakRSSMB, err = rl.stop()
	return err
}

func (b *bench) runPoll(ctx context.Context, s system, wl workload, n names, r *runResult) error {
	if err := createOutbox(ctx, b.conn, n, true); err != nil {
		return err
	}
	spec := s.Poll
	spec.URL, spec.Table = b.url, n.Table
	var pp *pollerProc
	if wl.backlog {
		if err := b.produce(ctx, wl, n.Table, r); err != nil {
			return err
		}
		snap := b.snap()
		t0 := time.Now()
		var err error
		if pp, err = startPoller(spec, r.Produced); err != nil {
			return err
		}
		at, reached, err := pp.wait(b.p.PollCap)
		if err != nil {
			pp.stop()
			return err
		}
		r.Seconds = at.Sub(t0).Seconds()
		r.Capped = !reached
		r.Delivered = pp.sent.Load()
		r.RelayCPU = procCPU(pp.cmd.Process.Pid)
		r.CtxSwitches = ctxSwitches(pp.cmd.Process.Pid)
		r.ServerCPU, r.OtherCores = b.since(snap, r.RelayCPU)
	} else {
		var err error
		if pp, err = startPoller(spec, math.MaxInt64); err != nil {
			return err
		}
		if err := pp.waitReady(30 * time.Second); err != nil {
			pp.stop()
			return err
		}
		snap, cpu0, cs0 := b.snap(), procCPU(pp.cmd.Process.Pid), ctxSwitches(pp.cmd.Process.Pid)
		if err := b.produce(ctx, wl, n.Table, r); err != nil {
			pp.stop()
			return err
		}
		// A classic poller falls behind at these rates: give it PollDrain
		// after the producer stopped, then count what is left.
		_ = waitUntil(b.p.PollDrain, func() bool { return pp.sent.Load() >= r.Produced }, nil)
		r.Delivered = pp.sent.Load()
		r.Backlog = r.Produced - r.Delivered
		r.RelayCPU = procCPU(pp.cmd.Process.Pid) - cpu0
		r.CtxSwitches = ctxSwitches(pp.cmd.Process.Pid) - cs0
		r.ServerCPU, r.OtherCores = b.since(snap, r.RelayCPU)
	}
	res, _, rss, err := pp.stop()
	life := time.Since(pp.started).Seconds()
	r.PeakRSSMB = rss
	if err != nil {
		return err
	}
	r.Queries = res.Queries
	r.QPS = float64(res.Queries) / life
	if !wl.backlog {
		r.Hist = &Hist{Bounds: relayBounds(), Counts: res.Counts}
	}
	load, err := readTableLoad(ctx, b.conn, n)
	if err != nil {
		return fmt.Errorf("reading table statistics: %w", err)
	}
	r.Load = &load
	return nil
}

// ceilingFile is where pg_recvlogical writes in a catch-up run ("" for a
// pipe, with -ceiling-pipe).
func (b *bench) ceilingFile(n names) string {
	if b.ceilingPipe {
		return ""
	}
	return filepath.Join(b.tmp, n.Table+".pgoutput")
}
