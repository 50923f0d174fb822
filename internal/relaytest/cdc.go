package relaytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
	buildOut  []byte
)

// BuildCDC builds the relay binary (./cmd/cdc) once per test process and
// returns its path, for tests that run cdc as a user does. go test puts
// its own go command first on PATH; without one the test is skipped.
func BuildCDC(t testing.TB) string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to build cmd/cdc: %v", err)
	}
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "walpost-cdc-"); buildErr != nil {
			return
		}
		cmd := exec.Command(goCmd, "build", "-o", filepath.Join(buildDir, "cdc"), "github.com/walpost/walpost/cmd/cdc")
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("go build ./cmd/cdc: %v\n%s", buildErr, buildOut)
	}
	return filepath.Join(buildDir, "cdc")
}

// Proc is a running command, a cdc process as a rule: its output is kept
// in Stdout and Stderr while it runs.
type Proc struct {
	Cmd            *exec.Cmd
	Stdout, Stderr *Buffer
	done           chan struct{}
}

// StartCDC starts bin with args and extra environment variables
// (KEY=value), and kills it when the test ends.
func StartCDC(t testing.TB, bin string, env []string, args ...string) *Proc {
	t.Helper()
	return StartCDCIn(t, "", bin, env, args...)
}

// StartCDCIn is StartCDC in the working directory dir ("" for the
// test's own).
func StartCDCIn(t testing.TB, dir, bin string, env []string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	return Start(t, cmd)
}

// Start starts cmd (whose Stdout and Stderr it sets), and kills it when
// the test ends: for a command StartCDC does not build, such as a test
// binary that runs cdc's main.
func Start(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, Stdout: &Buffer{}, Stderr: &Buffer{}, done: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Stdout, p.Stderr
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.Cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Cmd.Process.Kill()
		<-p.done
	})
	return p
}

// Wait waits up to timeout for the process to end and returns its exit
// code (-1 on timeout).
func (p *Proc) Wait(timeout time.Duration) int {
	select {
	case <-p.done:
		return p.Cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		return -1
	}
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill9 kills the process with SIGKILL and waits for it to be gone. It
// fails the test when the process had ended already: a fault test would
// not test the fault.
func (p *Proc) Kill9(t testing.TB) {
	t.Helper()
	if p.Exited() {
		t.Fatalf("kill -9: the process had exited already (%s)\n%s", p.Cmd.ProcessState, p.Logs())
	}
	p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// StopTimeout is how long Stop waits for the process to exit.
const StopTimeout = 30 * time.Second

// Stop sends SIGTERM and fails the test unless the process exits 0
// within StopTimeout.
func (p *Proc) Stop(t testing.TB) {
	t.Helper()
	p.Cmd.Process.Signal(syscall.SIGTERM)
	if code := p.Wait(StopTimeout); code != 0 {
		t.Fatalf("exit %d after SIGTERM (-1: still running after %s), want 0\n%s", code, StopTimeout, p.Logs())
	}
}

// Logs returns the end of the process's stderr (its log), for failure
// messages.
func (p *Proc) Logs() string {
	s := p.Stderr.String()
	if len(s) > 8000 {
		s = "…" + s[len(s)-8000:]
	}
	return "stderr:\n" + s
}

// Run runs bin with args to the end and returns its exit code and output.
func Run(t testing.TB, bin string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := StartCDC(t, bin, env, args...)
	code = p.Wait(2 * time.Minute)
	return code, p.Stdout.String(), p.Stderr.String()
}
