package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

var (
	cdcOnce sync.Once
	cdcPath string
	cdcErr  error
	cdcDir  string
)

// TestMain removes the cdc binary the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if cdcDir != "" {
		os.RemoveAll(cdcDir)
	}
	os.Exit(code)
}

// cdcBinary builds cmd/cdc from the repository, once per test binary.
func cdcBinary(t *testing.T) string {
	t.Helper()
	cdcOnce.Do(func() {
		cdcDir, cdcErr = os.MkdirTemp("", "walpost-deploy-cdc-")
		if cdcErr != nil {
			return
		}
		cdcPath = filepath.Join(cdcDir, "cdc")
		cmd := exec.Command("go", "build", "-o", cdcPath, "./cmd/cdc")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			cdcErr = &buildError{err, string(out)}
		}
	})
	if cdcErr != nil {
		t.Fatalf("building cdc: %v", cdcErr)
	}
	return cdcPath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// cdcFlagsError runs the real cdc's command-line parser over args (the
// arguments after the binary: a command, its flags and arguments) without
// running the command: with --help appended, cdc parses every flag before
// it and exits 0 only if the command exists and every flag is one it
// defines, with a value it accepts. It returns "" when cdc accepts args,
// else what cdc said.
func cdcFlagsError(t *testing.T, args []string) string {
	t.Helper()
	if len(args) == 0 {
		return "no command"
	}
	if slices.Contains(args, "--") || slices.Contains(args, "--help") || slices.Contains(args, "-h") {
		t.Fatalf("cdcFlagsError: args %q: cannot check them by appending --help", args)
	}
	cmd := exec.Command(cdcBinary(t), append(slices.Clone(args), "--help")...)
	cmd.Env = []string{} // the check must not depend on this machine's CDC_* or PG*
	out, err := cmd.CombinedOutput()
	if err != nil {
		return strings.TrimSpace(string(out)) + " (" + err.Error() + ")"
	}
	if !strings.HasPrefix(string(out), "usage: cdc "+args[0]) {
		return "cdc printed no usage of " + args[0] + ":\n" + string(out)
	}
	return ""
}

// TestCdcFlagsErrorRefusesWhatCdcRefuses: the check above fails for an
// unknown command, an unknown flag and a bad flag value, and passes for
// the commands as the deploy files run them.
func TestCdcFlagsErrorRefusesWhatCdcRefuses(t *testing.T) {
	for _, args := range [][]string{
		{"nope"},
		{"run", "--config", "/etc/walpost/cdc.yaml", "--nope"},
		{"init", "--configg", "/etc/walpost/cdc.yaml"},
		{"status", "--lsn", "0/1"},
		{"init", "--config", "/etc/walpost/cdc.yaml", "--wait", "soon"},
	} {
		if cdcFlagsError(t, args) == "" {
			t.Errorf("cdc accepts %q, want it refused", args)
		}
	}
	for _, args := range [][]string{
		{"run", "--config", "/etc/walpost/cdc.yaml"},
		{"init", "/etc/walpost/cdc.yaml"},
		{"init", "--config", "/etc/walpost/cdc.yaml", "--wait", "90s"},
		{"status", "--json", "/etc/walpost/cdc.yaml"},
	} {
		if e := cdcFlagsError(t, args); e != "" {
			t.Errorf("cdc refuses %q: %s", args, e)
		}
	}
}
