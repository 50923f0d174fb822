package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"
)

// machineInfo describes where the figures were measured.
type machineInfo struct {
	Date     string `json:"date"`
	CPUs     int    `json:"nproc"`
	CPUModel string `json:"cpu_model"`
	MemoryGB string `json:"memory"`
	Kernel   string `json:"kernel"`
	Go       string `json:"go"`
	Postgres string `json:"postgres"`
	LoadAvg  string `json:"loadavg_at_start"`
	// Fdatasync is the latency of a 4 KiB append + fdatasync in the
	// directory the file sink writes to (the disk the file sink pays for).
	Fdatasync string `json:"fdatasync"`
	// Virtualization says whether the CPU reports a hypervisor. Steal is
	// the share of the machine's CPU time the hypervisor gave to others
	// over the whole bench (set at its end): figures from a guest with
	// steal swing more, and ratios move between machines.
	Virtualization string `json:"virtualization"`
	Steal          string `json:"steal"`
}

// virtualization describes what /proc/cpuinfo's flags say of a hypervisor.
func virtualization(cpuinfo string) string {
	for line := range strings.Lines(cpuinfo) {
		if v, ok := strings.CutPrefix(line, "flags"); ok {
			if slices.Contains(strings.Fields(strings.TrimPrefix(strings.TrimSpace(v), ":")), "hypervisor") {
				return "a virtual machine (the CPU reports the hypervisor flag)"
			}
			return "none reported by the CPU"
		}
	}
	return "unknown"
}

// readSteal returns the machine's steal time so far in seconds (false
// when /proc/stat cannot tell).
func readSteal() (float64, bool) {
	t, ok := readCPUTicks()
	if !ok {
		return 0, false
	}
	return float64(t[statSteal]) / clkTck, true
}

// stealShare describes steal seconds over elapsed on cpus CPUs.
func stealShare(steal float64, elapsed time.Duration, cpus int) string {
	if elapsed <= 0 || cpus <= 0 {
		return ""
	}
	return fmt.Sprintf("%.1f%% of the CPU time over the run (/proc/stat steal: %.1f s of %.0f s on %d CPUs)",
		100*steal/(elapsed.Seconds()*float64(cpus)), steal, elapsed.Seconds()*float64(cpus), cpus)
}

// measureFdatasync appends 4 KiB and fdatasyncs in dir for d, and returns
// the latency's p50, p99 and largest sample.
func measureFdatasync(dir string, d time.Duration) string {
	f, err := os.CreateTemp(dir, "fsync-")
	if err != nil {
		return "unknown: " + err.Error()
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	h := NewHist()
	var worst time.Duration
	n := 0
	for start := time.Now(); time.Since(start) < d; n++ {
		t := time.Now()
		if _, err := f.Write(buf); err != nil {
			return "unknown: " + err.Error()
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return "unknown: " + err.Error()
		}
		el := time.Since(t)
		worst = max(worst, el)
		h.Observe(el.Seconds())
	}
	return fmt.Sprintf("p50 %s ms, p99 %s ms, max %s ms (%d × 4 KiB append + fdatasync in %v, in the file sink's directory)",
		ms(h.Quantile(0.5)*1000), ms(h.Quantile(0.99)*1000), ms(float64(worst)/1e6), n, d)
}

func readMachine(ctx context.Context, conn *pgx.Conn) machineInfo {
	m := machineInfo{Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.Virtualization = virtualization(string(b))
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				m.CPUModel = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
				m.MemoryGB = strconv.FormatFloat(kb/1024/1024, 'f', 1, 64) + " GiB"
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	_ = conn.QueryRow(ctx, "SELECT current_setting('server_version')").Scan(&m.Postgres)
	return m
}
