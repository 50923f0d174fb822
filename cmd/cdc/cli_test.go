package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"
)

// cdc runs the binary (the test binary as cdc, see TestMain) to its end
// and returns its exit code, stdout and stderr.
func cdc(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := startCDCEnv(t, env, args...)
	if code = p.Wait(60 * time.Second); code == -1 {
		t.Fatalf("cdc %s did not exit:\n%s", strings.Join(args, " "), p.Stderr.String())
	}
	return code, p.Stdout.String(), p.Stderr.String()
}

// TestHelpOfEveryCommandNamesItsFlags: cdc help X, cdc X --help and cdc X
// -h exit 0 and print to stdout the command's usage line, each of its
// flags, its exit codes and the environment variables it reads (CDC_* for
// the commands with a configuration, GOMAXPROCS for run); cdc --help and
// cdc help print the overview naming every command; cdc alone prints it to
// stderr and exits 2.
func TestHelpOfEveryCommandNamesItsFlags(t *testing.T) {
	t.Parallel()
	want := map[string][]string{
		"run":         {"--config file", "exit codes:", "CDC_CONFIG", "CDC_POSTGRES_URL", "CDC_RELAY_WINDOW_MESSAGES", "GOMAXPROCS"},
		"init":        {"--config file", "exit codes:", "CDC_CONFIG", "CDC_POSTGRES_URL"},
		"status":      {"--config file", "--json", "exit codes:", "CDC_CONFIG", "CDC_POSTGRES_URL"},
		"skip":        {"--config file", "--lsn LSN", "exit codes:", "CDC_CONFIG", "CDC_POSTGRES_URL"},
		"recover":     {"--config file", "--since time", "--margin duration", "exit codes:", "CDC_CONFIG", "CDC_POSTGRES_URL"},
		"replay":      {"--config file", "--since duration", "--from-id id", "--to-id id", "--sink name", "--skip-rejected", "130  interrupted", "CDC_CONFIG"},
		"resync":      {"--config file", "--since duration", "exit codes:", "CDC_CONFIG", "CDC_POSTGRES_URL"},
		"dead-letter": {"--config file", "--json", "--all", "--sink name", "list | show ID", "exit codes:", "CDC_CONFIG"},
		"version":     {"-h, --help", "exit codes:", "(unknown revision)"},
		"help":        {"-h, --help", "exit codes:"},
	}
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	if got := slices.Sorted(func(yield func(string) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
	}); !slices.Equal(got, slices.Sorted(slices.Values(names))) {
		t.Fatalf("commands %v, the test knows %v: add the new command here", names, got)
	}
	for name, wants := range want {
		for _, args := range [][]string{{name, "--help"}, {name, "-h"}, {"help", name}} {
			code, stdout, stderr := cdc(t, nil, args...)
			if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "usage: cdc "+name) {
				t.Fatalf("cdc %s: exit %d, stderr %q, stdout:\n%s", strings.Join(args, " "), code, stderr, stdout)
			}
			for _, w := range wants {
				if !strings.Contains(stdout, w) {
					t.Errorf("cdc %s: no %q in:\n%s", strings.Join(args, " "), w, stdout)
				}
			}
			if name != "run" && strings.Contains(stdout, "GOMAXPROCS") {
				t.Errorf("cdc %s names GOMAXPROCS, which only run reads", strings.Join(args, " "))
			}
		}
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, stdout, stderr := cdc(t, nil, args...)
		if code != 0 || stderr != "" {
			t.Fatalf("cdc %s: exit %d, stderr %q", args[0], code, stderr)
		}
		for _, name := range names {
			if !strings.Contains(stdout, "\n  "+name+" ") {
				t.Errorf("cdc %s does not list %s:\n%s", args[0], name, stdout)
			}
		}
	}
	code, stdout, stderr := cdc(t, nil)
	if code != 2 || stdout != "" || !strings.Contains(stderr, "usage: cdc <command>") {
		t.Fatalf("cdc alone: exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
}

// TestHelpListsEveryCDCVariable: the variables the help lists are exactly
// those internal/config overrides settings with (found in its source), and
// each one listed does override its setting.
func TestHelpListsEveryCDCVariable(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../internal/config/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("internal/config's source not found: %v", err)
	}
	inSource := map[string]bool{}
	re := regexp.MustCompile(`"(CDC_[A-Z_]+)"`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			inSource[m[1]] = true
		}
	}
	listed := map[string]bool{}
	for _, v := range configEnv {
		if strings.HasPrefix(v.name, "CDC_") && v.name != "CDC_CONFIG" {
			listed[v.name] = true
		}
	}
	for v := range inSource {
		if !listed[v] {
			t.Errorf("internal/config reads %s; the help does not list it (help.go, configEnv)", v)
		}
	}
	for v := range listed {
		if !inSource[v] {
			t.Errorf("the help lists %s; internal/config does not read it", v)
		}
	}
}

// TestConfigAsArgument: a command's one argument is its configuration file
// (also with flags after it, and with --config naming the same file); two
// files, or --config and an argument naming different ones, are a usage
// error (exit 2, one line) and never silently ignored; so are unknown
// flags and arguments to version.
func TestConfigAsArgument(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	other := filepath.Join(dir, "other.yaml")
	writeFile(t, other, "postgres: {url: 'postgres://x', slott: s}\nsinks: [{name: a, kind: stdout}]\n")
	env := []string{"CDC_CONFIG=" + filepath.Join(dir, "absent.yaml")}
	// Each reaches other.yaml: its typo is the error.
	for _, args := range [][]string{
		{"status", other},
		{"run", other},
		{"status", other, "--json"},
		{"skip", other, "--lsn", "0/1"},
		{"init", "--config", other, other},
		{"init", "--config", filepath.Join(dir, ".", "other.yaml"), other},
	} {
		code, _, stderr := cdc(t, env, args...)
		if code != 2 || !strings.Contains(stderr, `unknown key "slott"`) || !strings.HasPrefix(stderr, "cdc "+args[0]+": ") {
			t.Errorf("cdc %s: exit %d, want 2 with other.yaml's error:\n%s", strings.Join(args, " "), code, stderr)
		}
	}
	// Without an argument or --config: $CDC_CONFIG.
	if code, _, stderr := cdc(t, env, "status"); code != 2 || !strings.Contains(stderr, "absent.yaml") {
		t.Errorf("cdc status with CDC_CONFIG: exit %d:\n%s", code, stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", other, "second.yaml"}, "one configuration file at most"},
		{[]string{"status", "--config", other, "second.yaml"}, "name two configuration files"},
		{[]string{"run", "--nope"}, "flag provided but not defined: -nope (see 'cdc run --help')"},
		{[]string{"status", "--lsn", "0/1", other}, "flag provided but not defined: -lsn"},
		{[]string{"skip", other}, "--lsn is required"},
		{[]string{"skip", other, "--lsn", "zz"}, `--lsn "zz" is not an LSN`},
		{[]string{"skip", other, "--lsn", "0/100000000"}, `--lsn "0/100000000" is not an LSN`}, // not 1/0
		{[]string{"version", other}, "takes no arguments"},
		{[]string{"launch"}, `unknown command "launch"`},
	} {
		code, stdout, stderr := cdc(t, env, c.args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("cdc %s: exit %d, stdout %q, want exit 2 and one line with %q on stderr:\n%s", strings.Join(c.args, " "), code, stdout, c.want, stderr)
		}
	}
}

// TestVersionPrintsTheRevision: a binary built with VCS information in a
// git checkout prints the commit it was built from (with "+dirty" when the
// tree had changes) and its time, and -X main.version wins for the
// version; one built without (the test binary: go test stamps none)
// prints "(unknown revision)".
func TestVersionPrintsTheRevision(t *testing.T) {
	t.Parallel()
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				t.Fatalf("the test binary has VCS information (%s): this test expects none", s.Value)
			}
		}
	}
	code, stdout, _ := cdc(t, nil, "version")
	if code != 0 || !regexp.MustCompile(`^cdc \(walpost\) \S+ \(unknown revision\) go\S+ \S+/\S+\n$`).MatchString(stdout) {
		t.Errorf("version without VCS information: exit %d: %q", code, stdout)
	}

	if testing.Short() {
		t.Skip("builds the binary")
	}
	head := func() string {
		out, err := exec.Command("git", "rev-parse", "HEAD").Output()
		if err != nil {
			t.Skipf("not in a git checkout (git rev-parse: %v): nothing to stamp", err)
		}
		return strings.TrimSpace(string(out))
	}
	before := head()
	bin := filepath.Join(t.TempDir(), "cdc")
	build := exec.Command("go", "build", "-buildvcs=true", "-ldflags", "-X main.version=v9.8.7-test", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	after := head() // another commit may land meanwhile
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^cdc \(walpost\) v9\.8\.7-test \(revision ([0-9a-f]{40})(\+dirty)?, (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)\) go\S+ \S+/\S+\n$`).FindStringSubmatch(string(out))
	if m == nil || (m[1] != before && m[1] != after) {
		t.Fatalf("version built at %s: %q", before, out)
	}
	t.Logf("%s", out)
}
