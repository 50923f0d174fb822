package main

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: the controlling side and the
// terminal a command gets as its stdin, stdout and stderr.
func openPTY(t *testing.T) (ctl, tty *os.File) {
	t.Helper()
	ctl, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	fd := int(ctl.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ctl, tty
}

// TestMakeDemoStopsWithExitZeroOnCtrlC runs `make demo` in a terminal, as
// a newcomer does, and presses Ctrl-C once the sample messages are
// relayed: the relay drains and the whole command exits 0 (GNU make
// alone would exit 130 on the interrupt; see takeForeground).
func TestMakeDemoStopsWithExitZeroOnCtrlC(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	ctl, tty := openPTY(t)
	defer ctl.Close()
	cmd := exec.Command("make", "-C", "../..", "demo", "DEMOFLAGS=-n 2")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	var mu sync.Mutex
	var out bytes.Buffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ctl.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	output := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(4 * time.Minute)
	for !strings.Contains(output(), "all 2 committed") {
		select {
		case err := <-done:
			t.Fatalf("make demo ended before Ctrl-C: %v\n%s", err, output())
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("make demo did not relay its messages in time\n%s", output())
		case <-time.After(100 * time.Millisecond):
		}
	}
	ctl.Write([]byte{3}) // Ctrl-C: the terminal sends SIGINT to its foreground group
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("make demo ended with %v after Ctrl-C, want exit 0\n%s", err, output())
		}
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatalf("make demo did not stop within a minute of Ctrl-C\n%s", output())
	}
	if got := output(); !strings.Contains(got, "relay stopped") || strings.Count(got, `"type":"order.created"`) != 2 {
		t.Fatalf("the relay did not print both messages and stop cleanly:\n%s", got)
	}
}
