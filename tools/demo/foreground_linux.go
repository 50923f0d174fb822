package main

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// takeForeground puts the demo (and the relay it starts) in a process
// group of its own and makes it the terminal's foreground group, so that
// Ctrl-C reaches the demo and the relay only, not `make` around them:
// GNU make exits 130 on SIGINT whatever its recipe does, and the demo
// stops the relay cleanly and exits 0, so `make demo` then exits 0 too.
// It returns the function that gives the terminal back; without a
// terminal on stdin it does nothing.
func takeForeground() (restore func()) {
	tty := int(os.Stdin.Fd())
	old, err := unix.IoctlGetInt(tty, unix.TIOCGPGRP)
	if err != nil {
		return func() {} // not a terminal
	}
	signal.Ignore(unix.SIGTTOU) // a background group may not set the foreground otherwise
	if unix.Setpgid(0, 0) != nil {
		return func() {}
	}
	if unix.IoctlSetPointerInt(tty, unix.TIOCSPGRP, unix.Getpgrp()) != nil {
		return func() {}
	}
	return func() { unix.IoctlSetPointerInt(tty, unix.TIOCSPGRP, old) }
}
