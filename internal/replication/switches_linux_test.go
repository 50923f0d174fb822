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

// tcpPair returns both ends of a loopback TCP connection, closed when
// the test ends.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return client, server
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
// others; WALPOST_COALESCE, removed by issue 34, draws a warning that it
// is ignored, whatever its value.
func TestNewStreamLogsTheSwitchesThatAreSet(t *testing.T) {
	for _, v := range []string{"off", "on"} {
		withSwitch(t, &coalesceSwitch, EnvCoalesce, v)
		var buf bytes.Buffer
		NewStream(StreamOptions{Log: zerolog.New(&buf)}, nil)
		var envs []string
		for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
			var m map[string]any
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
			msg, _ := m["message"].(string)
			if m["env"] == EnvCoalesce && (m["level"] != "warn" || !strings.Contains(msg, "ignored")) {
				t.Errorf("%s=%s: line %v, want a warning that it is ignored", EnvCoalesce, v, m)
			}
			envs = append(envs, m["env"].(string))
		}
		want := []string{EnvCoalesce}
		if rawnet.Setting().Set() { // the test process was started with WALPOST_RAWNET set
			want = []string{rawnet.EnvRawSyscalls, EnvCoalesce}
		}
		if strings.Join(envs, ",") != strings.Join(want, ",") {
			t.Errorf("%s=%s: logged switches %v, want %v", EnvCoalesce, v, envs, want)
		}
	}
	withSwitch(t, &coalesceSwitch, EnvCoalesce, "")
	var buf bytes.Buffer
	NewStream(StreamOptions{Log: zerolog.New(&buf)}, nil)
	if strings.Contains(buf.String(), EnvCoalesce) {
		t.Errorf("%s unset, but logged: %s", EnvCoalesce, buf.String())
	}
}
