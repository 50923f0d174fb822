package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// clkTck is USER_HZ: /proc/PID/stat counts CPU time in these ticks. It is
// 100 on every Linux architecture Go supports.
const clkTck = 100

// procStat is what the bench reads of /proc/PID/stat.
type procStat struct {
	ppid                         int
	utime, stime, cutime, cstime int64 // ticks
}

func (s procStat) cpu() float64      { return float64(s.utime+s.stime) / clkTck }
func (s procStat) childCPU() float64 { return float64(s.cutime+s.cstime) / clkTck }

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	return parseStat(string(b))
}

// parseStat parses /proc/PID/stat; the command name (field 2) may hold
// spaces and parentheses, so fields are counted after its last ')'.
func parseStat(s string) (procStat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("bad /proc stat line")
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("short /proc stat line")
	}
	num := func(k int) int64 { v, _ := strconv.ParseInt(f[k-3], 10, 64); return v }
	return procStat{ppid: int(num(4)), utime: num(14), stime: num(15), cutime: num(16), cstime: num(17)}, nil
}

// procCPU is the CPU seconds (user + system) process pid has used so far.
func procCPU(pid int) float64 {
	s, err := readStat(pid)
	if err != nil {
		return 0
	}
	return s.cpu()
}

// peakRSSMB is VmHWM of process pid in MiB.
func peakRSSMB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v)
			kb, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				return 0, err
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// The columns of /proc/stat's cpu lines, after the line's name.
const (
	statUser = iota
	statNice
	statSystem
	statIdle
	statIOWait
	statIRQ
	statSoftIRQ
	statSteal
)

// cpuTicks returns the columns of /proc/stat's first line (all CPUs) in
// USER_HZ ticks: user, nice, system, idle, iowait, irq, softirq, steal, …
func cpuTicks(stat string) ([]int64, bool) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) <= statSteal+1 || f[0] != "cpu" {
		return nil, false
	}
	t := make([]int64, len(f)-1)
	for i, v := range f[1:] {
		t[i], _ = strconv.ParseInt(v, 10, 64)
	}
	return t, true
}

// readCPUTicks returns cpuTicks of /proc/stat now.
func readCPUTicks() ([]int64, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil, false
	}
	return cpuTicks(string(b))
}

// machineBusy is the CPU seconds all CPUs spent not idle since boot
// (/proc/stat: user, nice, system, irq, softirq, steal).
func machineBusy() float64 {
	t, ok := readCPUTicks()
	if !ok {
		return 0
	}
	var ticks int64
	for _, i := range []int{statUser, statNice, statSystem, statIRQ, statSoftIRQ, statSteal} {
		ticks += t[i]
	}
	return float64(ticks) / clkTck
}

// ctxSwitches is the voluntary and involuntary context switches of all
// threads of process pid so far (threads that exited are not counted).
func ctxSwitches(pid int) int64 {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0
	}
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			for _, k := range []string{"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"} {
				if v, ok := strings.CutPrefix(line, k); ok {
					c, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					n += c
				}
			}
		}
	}
	return n
}

// brokerComms are the process names (/proc/PID/comm) of the servers a
// sink kind publishes to on this machine: their CPU is the system's, not
// other load.
var brokerComms = map[string][]string{
	"nats":     {"nats-server"},
	"rabbitmq": {"beam.smp"},
}

// commCPU is the CPU seconds used so far by every process whose name is
// one of comms (0 when none runs, or /proc hides them).
func commCPU(comms ...string) float64 {
	if len(comms) == 0 {
		return 0
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var sum float64
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || !slices.Contains(comms, strings.TrimSpace(string(b))) {
			continue
		}
		sum += procCPU(pid)
	}
	return sum
}
