package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/walpost/walpost/internal/pgtest"
)

// The idle-fleet row (issue 34): what a fleet instance costs while its
// sources have nothing to relay. Twenty sources (one outbox, publication
// and slot each, on the bench's server) in one `cdc run --config DIR`,
// every one streaming, nothing written; and a second instance of the same
// directory, standby for all twenty (every slot held by the first). Both
// are measured over the same window, after they settled: CPU as a share of
// one core, and the resident set at the end.

const (
	// wIdle is the workload; kindIdle the system's Kind.
	wIdle    = "idle"
	kindIdle = "idle"
	// idleSources is how many sources the instances run.
	idleSources = 20
	// idleGoalCPU and idleGoalRSS are the targets for the streaming
	// instance: % of a core, MB.
	idleGoalCPU = 1.0
	idleGoalRSS = 200.0
)

var idleSystem = system{Name: "idle_fleet20", Label: "walpost, 20 idle sources in one instance (+ a standby instance)", Kind: kindIdle,
	Only: []string{wIdle}}

func init() {
	allWorkloads = append(allWorkloads, wIdle)
	allSystems = append(allSystems, idleSystem)
	workloadSystems[wIdle] = []string{idleSystem.Name}
	presets["@idle"] = map[string][]string{wIdle: {idleSystem.Name}}
}

// idleWindow is how long the instances are measured, after idleSettle.
func (b *bench) idleWindow() time.Duration {
	if b.quick {
		return 20 * time.Second
	}
	return 60 * time.Second
}

const idleSettle = 15 * time.Second

// runIdle measures the idle fleet: r.RelayCPU and r.PeakRSSMB are the
// streaming instance's (RSS now, not the peak), r.StandbyCPU and
// r.StandbyRSSMB the standby's, over r.Seconds.
func (b *bench) runIdle(ctx context.Context, r *runResult) (err error) {
	dir, err := os.MkdirTemp(b.tmp, "idle-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var all []names
	defer func() {
		for _, n := range all {
			if cerr := dropAll(ctx, b.conn, n); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
	}()
	for i := range idleSources {
		n := newNames("idle", "s"+strconv.Itoa(i))
		all = append(all, n)
		y := fmt.Sprintf("postgres:\n  url: %s\n  table: %s\n  publication: %s\n  slot: %s\nsinks:\n  - {name: discard, kind: discard}\nlog: {level: info, format: json}\n",
			b.url, n.Qualified(), n.Publication, n.Slot)
		if b.pprofDir != "" {
			y += "http: {pprof: true}\n" // every file, as the process has one listener
		}
		cfg := filepath.Join(dir, fmt.Sprintf("s%02d.yaml", i))
		if err := os.WriteFile(cfg, []byte(y), 0o644); err != nil {
			return err
		}
		if err := cdcInit(b.cdc, cfg); err != nil {
			return err
		}
	}
	start := func(name string) (*cdcProc, error) {
		port, err := pgtest.FreePort()
		if err != nil {
			return nil, err
		}
		logDir := filepath.Join(b.tmp, filepath.Base(dir)+"-"+name)
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			return nil, err
		}
		return startCDC(b.cdc, dir, logDir, nil, port, []string{fmt.Sprintf("CDC_HTTP_LISTEN=127.0.0.1:%d", port)})
	}
	active, err := start("active")
	if err != nil {
		return err
	}
	defer active.kill()
	for _, n := range all {
		if err := waitSlotActive(ctx, b.conn, n.Slot, 2*time.Minute, active.alive); err != nil {
			return fmt.Errorf("slot %s: %w", n.Slot, err)
		}
	}
	standby, err := start("standby")
	if err != nil {
		return err
	}
	defer standby.kill()
	time.Sleep(idleSettle)
	if err := errors.Join(active.alive(), standby.alive()); err != nil {
		return err
	}
	snap := b.snap()
	a0, s0 := procCPU(active.cmd.Process.Pid), procCPU(standby.cmd.Process.Pid)
	began := time.Now()
	var profiles []func() error
	if b.pprofDir != "" {
		for _, x := range []struct {
			p    *cdcProc
			name string
		}{{active, "active"}, {standby, "standby"}} {
			profiles = append(profiles, x.p.cpuProfile(b.idleWindow()-time.Second, filepath.Join(b.pprofDir, "idle-"+x.name+".pprof")))
		}
	}
	time.Sleep(b.idleWindow())
	for _, wait := range profiles {
		if err := wait(); err != nil {
			b.logf("  idle: profile: %v", err)
		}
	}
	r.RelayCPU = procCPU(active.cmd.Process.Pid) - a0
	r.StandbyCPU = procCPU(standby.cmd.Process.Pid) - s0
	r.Seconds = time.Since(began).Seconds()
	r.ServerCPU, r.OtherCores = b.since(snap, r.RelayCPU+r.StandbyCPU)
	r.PeakRSSMB, r.StandbyRSSMB = rssMB(active.cmd.Process.Pid), rssMB(standby.cmd.Process.Pid)
	if err := errors.Join(active.alive(), standby.alive()); err != nil {
		return err
	}
	for _, n := range all {
		var held bool
		if err := b.conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", n.Slot).Scan(&held); err != nil || !held {
			return fmt.Errorf("slot %s not held at the end of the window (%v)", n.Slot, err)
		}
	}
	b.logf("  idle: streaming instance %.2f%% of a core, %.0f MB; standby instance %.2f%% of a core, %.0f MB; PostgreSQL %.2f%% of a core",
		pct(r.RelayCPU, r.Seconds), r.PeakRSSMB, pct(r.StandbyCPU, r.Seconds), r.StandbyRSSMB, pct(r.ServerCPU, r.Seconds))
	if _, _, err := standby.stop(); err != nil {
		return err
	}
	_, _, err = active.stop()
	return err
}

// pct is cpu seconds over seconds as % of one core.
func pct(cpu, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return 100 * cpu / seconds
}

// rssMB is VmRSS of process pid in MiB (0 when unreadable).
func rssMB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				kb, _ := strconv.ParseFloat(f[0], 64)
				return kb / 1024
			}
		}
	}
	return 0
}

// idleTargets is issue 34's: 20 idle sources in ≤ 1% of a core and
// ≤ 200 MB. Shown when the idle row ran.
func (r *report) idleTargets() []target {
	x := r.get(idleSystem.Name, wIdle)
	if x == nil {
		return nil
	}
	tg := target{What: "20 idle streaming sources in one instance: CPU and resident memory",
		Goal: fmt.Sprintf("≤ %.0f%% of a core, ≤ %.0f MB", idleGoalCPU, idleGoalRSS)}
	if !x.ok() {
		tg.Measured = errCell(x)
		return []target{tg}
	}
	c := pct(x.RelayCPU, x.Seconds)
	tg.Measured = fmt.Sprintf("%.2f%% of a core, %s MB", c, mb(x.PeakRSSMB))
	tg.Pass = boolp(c <= idleGoalCPU && x.PeakRSSMB <= idleGoalRSS)
	return []target{tg}
}

// writeIdle writes the idle-fleet section, when its row ran.
func (r *report) writeIdle(p printer) {
	x := r.get(idleSystem.Name, wIdle)
	if x == nil {
		return
	}
	p("## Idle fleet: %d sources, nothing written\n\n", idleSources)
	p("%d sources (an outbox, publication and slot each, one discard sink) in one `cdc run --config DIR`, every one streaming, "+
		"and a second instance of the same directory, standby for all of them. Nothing is written. After %s to settle, both are "+
		"measured over the same window: CPU as a share of one core, resident memory (VmRSS) at its end.\n\n", idleSources, idleSettle)
	p("| instance | seconds | CPU, %% of a core | RSS MB | PostgreSQL, %% of a core | other load, cores |\n")
	p("|---|---:|---:|---:|---:|---:|\n")
	if !x.ok() {
		p("| %s | %s |  |  |  |  |\n", idleSystem.Label, errCell(x))
		p("\n")
		return
	}
	p("| streaming all %d | %.0f | %.2f | %s | %.2f | %.2f |\n", idleSources, x.Seconds, pct(x.RelayCPU, x.Seconds), mb(x.PeakRSSMB),
		pct(x.ServerCPU, x.Seconds), x.OtherCores)
	p("| standby for all %d | %.0f | %.2f | %s |  |  |\n", idleSources, x.Seconds, pct(x.StandbyCPU, x.Seconds), mb(x.StandbyRSSMB))
	p("\n")
}
