package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walpost/walpost/internal/fleet"
	"github.com/walpost/walpost/internal/relay"
)

// describingRegisterer registers with a real registry and notes the name
// of every metric described, and which are histograms: a vector with no
// series yet is not in Gather's output, but it is described.
type describingRegisterer struct {
	reg        *prometheus.Registry
	names      map[string]bool
	histograms map[string]bool
}

var fqNameRE = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d *describingRegisterer) Register(c prometheus.Collector) error {
	if err := d.reg.Register(c); err != nil {
		return err
	}
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		m := fqNameRE.FindStringSubmatch(desc.String())
		if m == nil {
			continue
		}
		d.names[m[1]] = true
		switch c.(type) {
		case *prometheus.HistogramVec, prometheus.Histogram, *prometheus.SummaryVec, prometheus.Summary:
			d.histograms[m[1]] = true
		}
	}
	return nil
}

func (d *describingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

func (d *describingRegisterer) Unregister(c prometheus.Collector) bool { return d.reg.Unregister(c) }

// relayMetricNames is every series name the relay's metrics can have:
// the names relay.NewMetrics registers, with _bucket, _sum and _count for
// its histograms.
func relayMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	d := &describingRegisterer{reg: prometheus.NewRegistry(), names: map[string]bool{}, histograms: map[string]bool{}}
	relay.NewMetrics(d)
	// A process of several sources (cdc run --config DIR) adds its
	// per-source gauges (docs/fleet.md).
	fleet.NewSourceGauges(d)
	if len(d.names) < 5 {
		t.Fatalf("relay.NewMetrics registered only %v", d.names)
	}
	out := map[string]bool{}
	for n := range d.names {
		out[n] = true
		if d.histograms[n] {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[n+s] = true
			}
		}
	}
	// walpost_build_info{version,revision} is registered by the binary
	// (relay.RegisterBuildInfo, being added alongside these files), not
	// by relay.NewMetrics: allowed by name here.
	out["walpost_build_info"] = true
	// up{job=...} is Prometheus's own, one per scrape target: the only
	// series left when a relay is gone.
	out["up"] = true
	return out
}

// Pieces of PromQL that hold no metric name, removed before looking for names.
var (
	promStringRE   = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promBracesRE   = regexp.MustCompile(`\{[^{}]*\}|\[[^\[\]]*\]`)
	promGroupingRE = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promNumberRE   = regexp.MustCompile(`(^|[^A-Za-z0-9_:$])\d[A-Za-z0-9_.]*`)
	promVarRE      = regexp.MustCompile(`\$\w+`)
	promIdentRE    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promKeywords   = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"atan2": true, "inf": true, "nan": true, "by": true, "without": true, "on": true, "ignoring": true,
		"group_left": true, "group_right": true}
)

// metricNames returns the metric names a PromQL expression selects: every
// identifier that is not a function or aggregation (followed by "("), a
// keyword, a label (inside { } or a by/without/on/ignoring list), a
// number or duration, or a Grafana variable.
func metricNames(expr string) []string {
	s := promStringRE.ReplaceAllString(expr, " ")
	for prev := ""; prev != s; {
		prev, s = s, promBracesRE.ReplaceAllString(s, " ")
	}
	s = promGroupingRE.ReplaceAllString(s, " ")
	s = promVarRE.ReplaceAllString(s, " ")
	s = promNumberRE.ReplaceAllString(s, "${1} ")
	var out []string
	for _, loc := range promIdentRE.FindAllStringIndex(s, -1) {
		id := s[loc[0]:loc[1]]
		if promKeywords[strings.ToLower(id)] || strings.HasPrefix(strings.TrimLeft(s[loc[1]:], " \t\n"), "(") {
			continue
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func TestMetricNamesFindsTheSelectorsOfAnExpression(t *testing.T) {
	for expr, want := range map[string][]string{
		`rate(walpost_messages_decoded_total{job=~"$job"}[$__rate_interval])`:                                       {"walpost_messages_decoded_total"},
		`histogram_quantile(0.99, sum by (sink, le) (rate(walpost_end_to_end_latency_seconds_bucket{a="b)"}[5m])))`: {"walpost_end_to_end_latency_seconds_bucket"},
		`max by (namespace, job) (walpost_lag_bytes) > 1073741824`:                                                  {"walpost_lag_bytes"},
		`(max(a_b offset 15m) - max(up)) <= 0 and on (job) delta(walpost_nope[15m]) > 1e6`:                          {"a_b", "up", "walpost_nope"},
		`absent(walpost_connected)`:                                      {"walpost_connected"},
		`clamp_min(deriv(max by (job) (walpost_confirmed_lsn)[5m:]), 0)`: {"walpost_confirmed_lsn"},
		`sum without (instance) (x) / ignoring (sink) group_left (y) z`:  {"x", "z"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%s) = %q, want %q", expr, got, want)
		}
	}
}

// dashboardExprs returns every PromQL expression of the dashboard: panel
// targets (also inside collapsed rows) and query variables.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("grafana/walpost.json")
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var walk func(panels []any)
	walk = func(panels []any) {
		for _, p := range panels {
			for _, tg := range list(dig(p, "targets")) {
				out["panel "+str(dig(p, "title"))+" "+str(dig(tg, "refId"))] = str(dig(tg, "expr"))
			}
			walk(list(dig(p, "panels")))
		}
	}
	walk(list(d["panels"]))
	for _, v := range list(dig(d, "templating", "list")) {
		if dig(v, "type") == "query" {
			q := str(dig(v, "query", "query"))
			if q == "" {
				q = str(dig(v, "query"))
			}
			// label_values(metric, label): the metric is the selector.
			if m := regexp.MustCompile(`^label_values\((.*),\s*\w+\)$`).FindStringSubmatch(q); m != nil {
				q = m[1]
			}
			out["variable "+str(dig(v, "name"))] = q
		}
	}
	return out
}

func alertExprs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, g := range list(yamlDoc(t, "prometheus/alerts.yaml")["groups"]) {
		for _, r := range list(dig(g, "rules")) {
			name := str(dig(r, "alert")) + str(dig(r, "record"))
			if name == "" || dig(r, "expr") == nil {
				t.Errorf("alerts.yaml: group %v: a rule without alert/record name or expr: %v", dig(g, "name"), r)
			}
			if _, dup := out[name]; dup {
				t.Errorf("alerts.yaml: rule %s twice", name)
			}
			out[name] = str(dig(r, "expr"))
		}
	}
	return out
}

func TestDashboardAndAlertsUseOnlyMetricsTheRelayRegisters(t *testing.T) {
	known := relayMetricNames(t)
	used := map[string]bool{}
	for file, exprs := range map[string]map[string]string{
		"deploy/grafana/walpost.json":   dashboardExprs(t),
		"deploy/prometheus/alerts.yaml": alertExprs(t),
	} {
		if len(exprs) < 5 {
			t.Errorf("%s: only %d expressions found", file, len(exprs))
		}
		for where, expr := range exprs {
			names := metricNames(expr)
			if len(names) == 0 {
				t.Errorf("%s: %s: no metric in %q", file, where, expr)
			}
			for _, n := range names {
				used[n] = true
				if !known[n] {
					t.Errorf("%s: %s uses %s, which the relay does not register (expr %q)", file, where, n, expr)
				}
			}
		}
	}
	// What the dashboard and alerts are for.
	for _, n := range []string{"walpost_lag_bytes", "walpost_confirmed_lsn", "walpost_messages_decoded_total",
		"walpost_messages_published_total", "walpost_sink_failing", "walpost_end_to_end_latency_seconds_bucket",
		"walpost_inflight_deliveries", "walpost_dead_lettered_total", "walpost_refused_total", "walpost_connected",
		"walpost_oldest_inflight_seconds", "walpost_slot_stalled_seconds"} {
		if !used[n] {
			t.Errorf("neither the dashboard nor the alerts use %s", n)
		}
	}
}

func TestAlertRulesAreComplete(t *testing.T) {
	for _, g := range list(yamlDoc(t, "prometheus/alerts.yaml")["groups"]) {
		for _, r := range list(dig(g, "rules")) {
			name := str(dig(r, "alert"))
			if name == "" {
				continue
			}
			if str(dig(r, "labels", "severity")) == "" || str(dig(r, "annotations", "summary")) == "" {
				t.Errorf("alerts.yaml: %s lacks labels.severity or annotations.summary", name)
			}
			// rate/irate/increase assume a counter: on a gauge they read
			// every drop (a restart, a takeover) as a reset.
			expr := str(dig(r, "expr"))
			for _, g := range []string{"walpost_confirmed_lsn", "walpost_lag_bytes", "walpost_connected", "walpost_inflight_deliveries", "walpost_sink_failing"} {
				if regexp.MustCompile(`\b(?:rate|irate|increase)\(\s*` + g + `\b`).MatchString(expr) {
					t.Errorf("alerts.yaml: %s applies a counter function to the gauge %s", name, g)
				}
			}
		}
	}
}

// TestAbsentAlertKeysOnTheDocumentedJob: the alert for a relay that is
// gone selects up{job="walpost"} (the job label documented in the file
// and in docs/deploy.md), never absent() of a walpost metric alone, which
// another job's walpost would keep present; every absent() in the rules
// names a job.
func TestAbsentAlertKeysOnTheDocumentedJob(t *testing.T) {
	exprs := alertExprs(t)
	absentRE := regexp.MustCompile(`absent\(([^()]*(?:\([^()]*\))?[^()]*)\)`)
	found := false
	for name, expr := range exprs {
		for _, m := range absentRE.FindAllStringSubmatch(expr, -1) {
			if !strings.Contains(m[1], `job="walpost"`) {
				t.Errorf("alerts.yaml: %s: absent(%s) names no job: it misses a relay that is gone while another job's walpost reports", name, m[1])
			}
			if strings.HasPrefix(strings.TrimSpace(m[1]), "up{") {
				found = true
			}
		}
	}
	if !found {
		t.Error(`alerts.yaml: no rule alerts on absent(up{job="walpost"...}): a relay that is gone goes unnoticed`)
	}
	for _, f := range []string{"prometheus/alerts.yaml", "../docs/deploy.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "job_name: walpost") {
			t.Errorf("%s does not document the scrape job the rules expect (job_name: walpost)", f)
		}
	}
}
