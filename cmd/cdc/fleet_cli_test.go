package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// The command line of several sources: --config several times or a
// directory (cdc run, cdc status); a configuration error in any source,
// two sources of one name, a bad --max-active or CDC_MAX_ACTIVE, sources
// given both as --config and as an argument, two sources whose tracing:
// differ and a bad OTEL_* variable are usage or configuration errors
// (exit 2, one line, nothing started).
func TestSeveralSourcesCommandLineErrors(t *testing.T) {
	dir := t.TempDir()
	good := "postgres: {url: 'postgres://127.0.0.1:1/x', slot: %s}\nsinks: [{name: a, kind: stdout}]\n"
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	writeFile(t, a, strings.Replace(good, "%s", "a", 1))
	writeFile(t, b, strings.Replace(good, "%s", "b", 1)+"slott: 1\n")
	other := filepath.Join(t.TempDir(), "a.yml")
	writeFile(t, other, strings.Replace(good, "%s", "c", 1))
	tdir := t.TempDir() // two sources whose tracing: differ
	t1, t2 := filepath.Join(tdir, "t1.yaml"), filepath.Join(tdir, "t2.yaml")
	writeFile(t, t1, strings.Replace(good, "%s", "t1", 1)+"tracing: {enabled: true, endpoint: 'http://127.0.0.1:1'}\n")
	writeFile(t, t2, strings.Replace(good, "%s", "t2", 1)+"tracing: {enabled: true, endpoint: 'http://127.0.0.1:2'}\n")
	env := []string{"CDC_CONFIG=" + filepath.Join(dir, "absent.yaml")}
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"run", "--config", a, "--config", b}, `b.yaml: slott: unknown key "slott"`},
		{nil, []string{"run", "--config", dir}, `b.yaml: slott: unknown key "slott"`},
		{nil, []string{"status", "--config", dir}, `b.yaml: slott: unknown key "slott"`},
		{nil, []string{"run", "--config", a, "--config", other}, `source name "a" is also`},
		{nil, []string{"run", "--config", a, "--config", other, "x.yaml"}, "give every source with --config"},
		{nil, []string{"run", "--config", a, "--max-active", "-1"}, "--max-active -1"},
		{[]string{"CDC_MAX_ACTIVE=two"}, []string{"run", "--config", a}, `CDC_MAX_ACTIVE="two"`},
		{nil, []string{"run", "--config", t.TempDir()}, "no *.yaml or *.yml file"},
		{nil, []string{"run", "--config", tdir}, "t2.yaml: tracing: differs from source t1's"},
		{[]string{"OTEL_TRACES_SAMPLER=sometimes"}, []string{"run", "--config", t1, "--config", a}, `tracing: OTEL_TRACES_SAMPLER: "sometimes"`},
	} {
		code, stdout, stderr := cdc(t, append(env, c.env...), c.args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("cdc %s: exit %d, stdout %q, want exit 2 and one line with %q:\n%s", strings.Join(c.args, " "), code, stdout, c.want, stderr)
		}
	}
}
