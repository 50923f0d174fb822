package main

import (
	"strings"
	"testing"
	"time"
)

// TestIdleTargetAndSection: the idle-fleet row gives the Targets table the
// streaming instance's share of a core and RSS against ≤ 1% and ≤ 200 MB,
// pass or FAIL, and a section with both instances; neither without the
// row.
func TestIdleTargetAndSection(t *testing.T) {
	rep := func(rs ...*runResult) *report {
		return newReport(machineInfo{}, paramsFor(false), false, allSystems, allWorkloads, finished(rs...), time.Minute)
	}
	for _, c := range []struct {
		name string
		r    *runResult
		want string
		pass bool
	}{
		{"pass", &runResult{System: idleSystem.Name, Workload: wIdle, Seconds: 60, RelayCPU: 0.48, PeakRSSMB: 44.1, StandbyCPU: 0.03, StandbyRSSMB: 40, Attempts: 1},
			"0.80% of a core, 44.1 MB", true},
		{"cpu over", &runResult{System: idleSystem.Name, Workload: wIdle, Seconds: 60, RelayCPU: 1.84, PeakRSSMB: 49.3, StandbyCPU: 1.23, StandbyRSSMB: 40.8, Attempts: 1},
			"3.07% of a core, 49.3 MB", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rep(c.r)
			tg := r.idleTargets()
			if len(tg) != 1 || tg[0].Measured != c.want || tg[0].Pass == nil || *tg[0].Pass != c.pass {
				t.Fatalf("targets %+v, want measured %q, pass %v", tg, c.want, c.pass)
			}
			md := r.markdown("")
			if !strings.Contains(md, "## Idle fleet: 20 sources, nothing written") || !strings.Contains(md, "| streaming all 20 | 60 |") ||
				!strings.Contains(md, "| standby for all 20 | 60 |") {
				t.Errorf("report lacks the idle section:\n%s", md)
			}
		})
	}
	if r := rep(); len(r.idleTargets()) != 0 || strings.Contains(r.markdown(""), "## Idle fleet") {
		t.Error("idle target or section without an idle run")
	}
}
