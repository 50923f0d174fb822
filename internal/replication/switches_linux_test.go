package replication

import (
	"bytes"
	"encoding/json"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/rawnet"
)

// withSwitch sets *sw to env=value for the test.
func withSwitch(t *testing.T, sw *rawnet.Switch, env, value string) {
	t.Helper()
	saved := *sw
	t.Cleanup(func() { *sw = saved })
	*sw = rawnet.ParseSwitch(env, value)
}

// rcvbuf returns SO_RCVBUF of conn's socket as the kernel reports it.
func rcvbuf(t *testing.T, conn net.Conn) int {
	t.Helper()
	raw, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var gerr error
	if err := raw.Control(func(fd uintptr) { n, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return n
}

// With WALPOST_COALESCE=off the coalescer keeps the state the stream asks
// for (so the stream still knows it is behind) but never sets
// SO_RCVLOWAT: 100 queued bytes stay readable at once.
func TestCoalescerSwitchedOffKeepsTheStateButLeavesTheSocketEager(t *testing.T) {
	withSwitch(t, &coalesceSwitch, EnvCoalesce, "off")
	client, server := tcpPair(t)
	co := newCoalescer(server)
	if !co.set(true) || !co.on {
		t.Fatal("set(true) switched off: want the state on (the stream is behind)")
	}
	if co.set(true) {
		t.Error("set(true) twice reported a change")
	}
	if _, err := client.Write(bytes.Repeat([]byte("x"), 100)); err != nil {
		t.Fatal(err)
	}
	if !readable(t, server, 1000) {
		t.Fatal("100 queued bytes not readable: SO_RCVLOWAT was set although WALPOST_COALESCE=off")
	}
	if !co.set(false) || co.on {
		t.Fatal("set(false) did not turn the state off")
	}
}

// 0 (postgres.receive_buffer auto and kernel, or left out) leaves the
// receive buffer to the kernel (auto set 64 KiB before issue 24); a size
// sets it.
func TestReceiveBufferIsTheKernelsUnlessASizeIsGiven(t *testing.T) {
	_, server := tcpPair(t)
	before := rcvbuf(t, server)
	if rb := sizeReceiveBuffer(server, 0); rb.set != 0 {
		t.Fatalf("receive buffer 0: set %d bytes", rb.set)
	}
	if got := rcvbuf(t, server); got != before {
		t.Fatalf("SO_RCVBUF %d after sizeReceiveBuffer(0), was %d", got, before)
	}
	if rb := sizeReceiveBuffer(server, 1<<17); rb.set != 1<<17 || rcvbuf(t, server) == before {
		t.Fatalf("a size of 128 KiB: set %d bytes, SO_RCVBUF %d (was %d)", rb.set, rcvbuf(t, server), before)
	}
}

// NewStream logs each switch that is set at info, and nothing for the
// others.
func TestNewStreamLogsTheSwitchesThatAreSet(t *testing.T) {
	withSwitch(t, &coalesceSwitch, EnvCoalesce, "off")
	var buf bytes.Buffer
	NewStream(StreamOptions{Log: zerolog.New(&buf)}, nil)
	var envs []string
	for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["level"] != "info" || m["env"] == EnvCoalesce && m["on"] != false {
			t.Errorf("line %v: want info, with on false for %s", m, EnvCoalesce)
		}
		envs = append(envs, m["env"].(string))
	}
	want := []string{EnvCoalesce}
	if rawnet.Setting().Set() { // the test process was started with WALPOST_RAWNET set
		want = []string{rawnet.EnvRawSyscalls, EnvCoalesce}
	}
	if strings.Join(envs, ",") != strings.Join(want, ",") {
		t.Errorf("logged switches %v, want %v", envs, want)
	}
}
