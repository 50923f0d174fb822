package main

import (
	"strings"
	"testing"
	"time"
)

// TestWebhookTargetAndSection: the webhook rows give the Targets table
// the ratio of concurrency 32 to 1 against the 20× goal, pass or FAIL,
// name a failed run (a broken per-key order) instead, and appear only
// when a webhook row ran.
func TestWebhookTargetAndSection(t *testing.T) {
	rep := func(rs ...*runResult) *report {
		return newReport(machineInfo{}, paramsFor(false), false, allSystems, allWorkloads, finished(rs...), time.Minute)
	}
	one := func() *runResult {
		return &runResult{System: "webhook_c1", Workload: wWebhook, Produced: 1000, Delivered: 1000, Seconds: 21, Attempts: 1}
	}
	for _, c := range []struct {
		name     string
		many     *runResult
		want     string
		pass     *bool
		sections string
	}{
		{"pass", &runResult{System: "webhook_c32", Workload: wWebhook, Produced: 20_000, Delivered: 20_000, Seconds: 14, Attempts: 1},
			"30.0× (1,429 vs 47.6 msgs/s; per-key order held)", boolp(true), "| 30× |"},
		{"fail", &runResult{System: "webhook_c32", Workload: wWebhook, Produced: 20_000, Delivered: 20_000, Seconds: 42, Attempts: 1},
			"10.0× (476 vs 47.6 msgs/s; per-key order held)", boolp(false), "| 10× |"},
		{"order broken", &runResult{System: "webhook_c32", Workload: wWebhook, Attempts: 1,
			Err: "per-key order broken: 3 first deliveries came after a later message of their key (key k7: n 107 first delivered after n 207)"},
			"webhook_c32 failed", nil, "per-key order broken"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rep(one(), c.many)
			tg := r.webhookTargets()
			if len(tg) != 1 || tg[0].Measured != c.want || (tg[0].Pass == nil) != (c.pass == nil) || (c.pass != nil && *tg[0].Pass != *c.pass) {
				t.Fatalf("targets %+v, want measured %q, pass %v", tg, c.want, c.pass)
			}
			md := r.markdown("")
			if !strings.Contains(md, "## Webhook: an endpoint taking 20 ms per request") || !strings.Contains(md, c.sections) ||
				!strings.Contains(md, "| webhook, 20 ms per request: concurrency 32 vs concurrency 1 (per-key order checked) | ≥ 20× |") {
				t.Errorf("report lacks the webhook section or target:\n%s", md)
			}
		})
	}
	if r := rep(); len(r.webhookTargets()) != 0 || strings.Contains(r.markdown(""), "## Webhook") {
		t.Error("webhook target or section without a webhook run")
	}
}
