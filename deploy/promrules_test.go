package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"go.yaml.in/yaml/v2"
)

// This file runs Prometheus rule unit tests (promtool test rules) in the
// test binary, with Prometheus' own packages: the rule files are loaded by
// rules.Manager (rulefmt and the PromQL parser, as Prometheus loads them),
// the input series by promqltest's loader into a test TSDB, and the groups
// are evaluated step by step with the PromQL engine, exactly as
// cmd/promtool/unittest.go does (that package is a main package and
// cannot be imported). Only the part of the format that
// deploy/prometheus/alerts_test.yaml uses is understood: rule_files,
// evaluation_interval, and tests with name, interval, input_series and
// alert_rule_test. Any other field (promql_expr_test, external_labels,
// group_eval_order, start_timestamp, fuzzy_compare) is refused by the
// strict decoding, not ignored: teach the runner before using it.

// promParser parses PromQL as promtool does by default.
var promParser = parser.NewParser(parser.Options{})

type ruleTestFile struct {
	RuleFiles          []string        `yaml:"rule_files"`
	EvaluationInterval model.Duration  `yaml:"evaluation_interval"`
	Tests              []ruleTestGroup `yaml:"tests"`
}

type ruleTestGroup struct {
	Name           string          `yaml:"name"`
	Interval       model.Duration  `yaml:"interval"`
	InputSeries    []inputSeries   `yaml:"input_series"`
	AlertRuleTests []alertRuleTest `yaml:"alert_rule_test"`
}

type inputSeries struct {
	Series string `yaml:"series"`
	Values string `yaml:"values"`
}

type alertRuleTest struct {
	EvalTime  model.Duration `yaml:"eval_time"`
	Alertname string         `yaml:"alertname"`
	ExpAlerts []expAlert     `yaml:"exp_alerts"`
}

type expAlert struct {
	ExpLabels      map[string]string `yaml:"exp_labels"`
	ExpAnnotations map[string]string `yaml:"exp_annotations"`
}

// runRuleTests runs the rule unit tests of file and returns, per test
// group (its name, or "#i"), the failures; no error for a group that
// passed. err is for a file that cannot be run at all.
func runRuleTests(file string) (failures map[string][]string, names []string, err error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, err
	}
	var f ruleTestFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, nil, fmt.Errorf("%s: %w (this runner understands only part of promtool's format; see promrules_test.go)", file, err)
	}
	if len(f.RuleFiles) == 0 || len(f.Tests) == 0 {
		return nil, nil, fmt.Errorf("%s: no rule_files or no tests", file)
	}
	var ruleFiles []string
	for _, rf := range f.RuleFiles {
		if !filepath.IsAbs(rf) {
			rf = filepath.Join(filepath.Dir(file), rf)
		}
		m, err := filepath.Glob(rf)
		if err != nil || len(m) == 0 {
			return nil, nil, fmt.Errorf("%s: rule_files %s matches no file (%v)", file, rf, err)
		}
		ruleFiles = append(ruleFiles, m...)
	}
	if f.EvaluationInterval == 0 {
		f.EvaluationInterval = model.Duration(time.Minute)
	}
	failures = map[string][]string{}
	for i, tg := range f.Tests {
		name := tg.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i)
		}
		if tg.Interval == 0 {
			tg.Interval = f.EvaluationInterval
		}
		names = append(names, name)
		failures[name] = tg.run(time.Duration(f.EvaluationInterval), ruleFiles)
	}
	return failures, names, nil
}

// seriesLoad is the input series as a promqltest load command.
func (tg ruleTestGroup) seriesLoad() string {
	var sb strings.Builder
	d := tg.Interval.String()
	fmt.Fprintf(&sb, "load %s\n", d)
	for _, s := range tg.InputSeries {
		fmt.Fprintf(&sb, "  %s %s\n", s.Series, s.Values)
	}
	return sb.String()
}

// alertSet is the alerts of one rule at one time, as label and annotation
// sets, sorted.
type alertSet []struct{ labels, annotations labels.Labels }

func (a alertSet) sorted() alertSet {
	sort.Slice(a, func(i, j int) bool {
		if c := labels.Compare(a[i].labels, a[j].labels); c != 0 {
			return c < 0
		}
		return labels.Compare(a[i].annotations, a[j].annotations) < 0
	})
	return a
}

func (a alertSet) equal(b alertSet) bool {
	return slices.EqualFunc(a, b, func(x, y struct{ labels, annotations labels.Labels }) bool {
		return labels.Equal(x.labels, y.labels) && labels.Equal(x.annotations, y.annotations)
	})
}

func (a alertSet) String() string {
	if len(a) == 0 {
		return "[]"
	}
	var parts []string
	for _, x := range a {
		parts = append(parts, "labels "+x.labels.String()+" annotations "+x.annotations.String())
	}
	return "[\n    " + strings.Join(parts, ",\n    ") + "\n  ]"
}

// run evaluates the rule groups every evalInterval from 0 to the latest
// eval_time, with the samples loaded up to each step, and at each
// eval_time compares the firing alerts of each alertname asked with the
// expected ones (the rule's alertname label added), as promtool does: an
// eval_time between two steps is checked against the earlier step.
func (tg ruleTestGroup) run(evalInterval time.Duration, ruleFiles []string) (errs []string) {
	suite, err := promqltest.NewLazyLoader(tg.seriesLoad(), promqltest.LazyLoaderOpts{
		EnableAtModifier: true, EnableNegativeOffset: true, Parser: promParser,
	})
	if err != nil {
		return []string{fmt.Sprintf("input_series: %v", err)}
	}
	defer func() {
		if err := suite.Close(); err != nil {
			errs = append(errs, err.Error())
		}
	}()
	suite.SubqueryInterval = evalInterval
	m := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(suite.QueryEngine(), suite.Storage()),
		AppendableV2: suite.Storage(),
		Context:      context.Background(),
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Logger:       promslog.NewNopLogger(),
		Parser:       promParser,
	})
	groupsMap, lerrs := m.LoadGroups(time.Duration(tg.Interval), labels.EmptyLabels(), "", nil, false, ruleFiles...)
	for _, e := range lerrs {
		errs = append(errs, "loading the rules: "+e.Error())
	}
	if len(errs) > 0 {
		return errs
	}
	var groups []*rules.Group
	for _, g := range groupsMap {
		groups = append(groups, g)
		for _, r := range g.Rules() {
			if ar, ok := r.(*rules.AlertingRule); ok {
				ar.SetRestored(true) // as promtool: ALERTS series from the first evaluation
			}
		}
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].Name() < groups[j].Name() })

	byTime := map[model.Duration][]alertRuleTest{}
	var times []model.Duration
	var maxt model.Duration
	for _, at := range tg.AlertRuleTests {
		if at.Alertname == "" {
			return []string{fmt.Sprintf("alert_rule_test at eval_time %s: no alertname", at.EvalTime)}
		}
		if _, ok := byTime[at.EvalTime]; !ok {
			times = append(times, at.EvalTime)
		}
		byTime[at.EvalTime] = append(byTime[at.EvalTime], at)
		maxt = max(maxt, at.EvalTime)
	}
	slices.Sort(times)
	known := map[string]bool{}
	for _, g := range groups {
		for _, r := range g.Rules() {
			if _, ok := r.(*rules.AlertingRule); ok {
				known[r.Name()] = true
			}
		}
	}
	for _, at := range tg.AlertRuleTests {
		if !known[at.Alertname] {
			// promtool would compare with no alerts and pass an empty
			// expectation: a misspelt name would test nothing.
			errs = append(errs, fmt.Sprintf("alert_rule_test: no alerting rule %s in %v", at.Alertname, ruleFiles))
		}
	}

	mint := time.Unix(0, 0).UTC()
	curr := 0
	for ts := mint; !ts.After(mint.Add(time.Duration(maxt))); ts = ts.Add(evalInterval) {
		var evalErrs []string
		suite.WithSamplesTill(ts, func(err error) {
			if err != nil {
				evalErrs = append(evalErrs, err.Error())
				return
			}
			for _, g := range groups {
				g.Eval(suite.Context(), ts)
				for _, r := range g.Rules() {
					if r.LastError() != nil {
						evalErrs = append(evalErrs, fmt.Sprintf("rule %s at %s: %v", r.Name(), ts.Sub(mint), r.LastError()))
					}
				}
			}
		})
		if len(evalErrs) > 0 {
			return append(errs, evalErrs...)
		}
		for curr < len(times) && ts.Sub(mint) <= time.Duration(times[curr]) && time.Duration(times[curr]) < ts.Add(evalInterval).Sub(mint) {
			for _, at := range byTime[times[curr]] {
				var got alertSet
				for _, g := range groups {
					for _, r := range g.Rules() {
						ar, ok := r.(*rules.AlertingRule)
						if !ok || ar.Name() != at.Alertname {
							continue
						}
						for _, a := range ar.ActiveAlerts() {
							if a.State == rules.StateFiring {
								got = append(got, struct{ labels, annotations labels.Labels }{a.Labels.Copy(), a.Annotations.Copy()})
							}
						}
					}
				}
				var want alertSet
				for _, e := range at.ExpAlerts {
					l := map[string]string{labels.AlertName: at.Alertname}
					for k, v := range e.ExpLabels {
						l[k] = v
					}
					want = append(want, struct{ labels, annotations labels.Labels }{labels.FromMap(l), labels.FromMap(e.ExpAnnotations)})
				}
				if got, want := got.sorted(), want.sorted(); !got.equal(want) {
					errs = append(errs, fmt.Sprintf("alertname %s at %s:\n  want %s\n  got  %s", at.Alertname, at.EvalTime, want, got))
				}
			}
			curr++
		}
	}
	return errs
}

// TestAlertRulesLoadAsPrometheusLoadsThem: alerts.yaml parses with
// Prometheus' rulefmt (unknown fields refused, every expr parsed by the
// PromQL parser, every template parsed), as `promtool check rules` does,
// with no two rules of the same name and labels.
func TestAlertRulesLoadAsPrometheusLoadsThem(t *testing.T) {
	rgs, errs := rulefmt.ParseFile("prometheus/alerts.yaml", false, model.UTF8Validation, promParser, promslog.NewNopLogger())
	for _, err := range errs {
		t.Error(err)
	}
	if rgs == nil {
		return
	}
	seen := map[string]bool{}
	n := 0
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			n++
			key := r.Alert + r.Record + labels.FromMap(r.Labels).String()
			if seen[key] {
				t.Errorf("alerts.yaml: rule %s%s with labels %v twice", r.Alert, r.Record, r.Labels)
			}
			seen[key] = true
		}
	}
	if n < 5 {
		t.Errorf("alerts.yaml: only %d rules", n)
	}
}

// TestAlertRulesPassTheirUnitTests runs deploy/prometheus/alerts_test.yaml
// (promtool's rule unit-test format) against alerts.yaml with
// Prometheus' packages, in the test binary: promtool is not needed.
func TestAlertRulesPassTheirUnitTests(t *testing.T) {
	failures, names, err := runRuleTests("prometheus/alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 5 {
		t.Errorf("alerts_test.yaml: only %d test groups", len(names))
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			for _, f := range failures[name] {
				t.Error(f)
			}
		})
	}
}

// TestRuleTestRunnerFailsAWrongExpectation: the runner is not a test that
// cannot fail. The unit tests with one expectation changed (an alert
// expected where none fires, none where one does, another label, another
// annotation, an alertname no rule has) each fail; so does the relay-gone
// test against a WalpostAbsent keyed on absent(walpost_connected), which
// the other job's series mask; and a field the runner does not know is
// refused. With promtool on PATH, promtool test rules gives the same
// verdict for each (except the unknown field, which promtool knows).
func TestRuleTestRunnerFailsAWrongExpectation(t *testing.T) {
	origTests, err := os.ReadFile("prometheus/alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	origRules, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	promtool, _ := exec.LookPath("promtool")
	for _, c := range []struct {
		name        string
		inRules     bool // the change is to alerts.yaml, not alerts_test.yaml
		old, new    string
		promtoolToo bool // promtool fails it too
	}{
		{"an alert expected too early", false, "      - eval_time: 9m\n        alertname: WalpostAbsent\n        exp_alerts: []",
			"      - eval_time: 9m\n        alertname: WalpostAbsent\n        exp_alerts: [{exp_labels: {severity: critical}}]", true},
		{"no alert expected where one fires", false, "      - eval_time: 11m\n        alertname: WalpostDeliveryStuck\n        exp_alerts: []",
			"      - eval_time: 14m\n        alertname: WalpostDeliveryStuck\n        exp_alerts: []", true},
		{"another label", false, "exp_labels: {severity: critical, namespace: walpost, job: walpost, kind: adopt}",
			"exp_labels: {severity: critical, namespace: walpost, job: walpost, kind: envelope}", true},
		{"another annotation", false, `summary: "walpost walpost/walpost: a delivery in flight for 13m 0s"`,
			`summary: "walpost walpost/walpost: a delivery in flight for 12m 0s"`, true},
		{"an alertname no rule has", false, "      - eval_time: 10m\n        alertname: WalpostSlotLost", "      - eval_time: 10m\n        alertname: WalpostSlotLots", true},
		{"the relay-gone alert masked by another job", true, `expr: absent(up{job="walpost"} == 1)`, `expr: absent(walpost_connected)`, true},
		{"a field the runner does not know", false, "evaluation_interval: 1m", "evaluation_interval: 1m\ngroup_eval_order: [walpost]", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tests, rulesFile := string(origTests), string(origRules)
			target := &tests
			if c.inRules {
				target = &rulesFile
			}
			if !strings.Contains(*target, c.old) {
				t.Fatalf("no longer holds %q: update this test", c.old)
			}
			*target = strings.Replace(*target, c.old, c.new, 1)
			dir := t.TempDir()
			f := filepath.Join(dir, "alerts_test.yaml")
			for name, content := range map[string]string{"alerts_test.yaml": tests, "alerts.yaml": rulesFile} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			failures, _, err := runRuleTests(f)
			n := 0
			for _, fs := range failures {
				n += len(fs)
			}
			if err == nil && n == 0 {
				t.Errorf("the runner passes the unit tests with %s", c.name)
			}
			if promtool == "" {
				return
			}
			out, perr := exec.Command(promtool, "test", "rules", f).CombinedOutput()
			if (perr != nil) != c.promtoolToo {
				t.Errorf("promtool test rules: %v, want failing %v:\n%s", perr, c.promtoolToo, out)
			}
		})
	}
}

// TestAlertRulesPassPromtool: promtool check rules and promtool test
// rules agree with the runner above on the real files. Skipped without
// promtool on PATH (apt-get install prometheus); the runner is the check.
func TestAlertRulesPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not on PATH (apt-get install prometheus); TestAlertRulesPassTheirUnitTests runs the same tests without it")
	}
	for _, args := range [][]string{{"check", "rules", "prometheus/alerts.yaml"}, {"test", "rules", "prometheus/alerts_test.yaml"}} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
