package replication

import (
	"bytes"
	"crypto/tls"
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// readable polls conn's socket for input for up to ms milliseconds.
func readable(t *testing.T, conn net.Conn, ms int) bool {
	t.Helper()
	raw, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var perr error
	if err := raw.Control(func(fd uintptr) {
		n, perr = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
	}); err != nil {
		t.Fatal(err)
	}
	if perr != nil {
		t.Fatal(perr)
	}
	return n > 0
}

// The stream relies on the kernel not reporting the socket readable (and
// so not waking the reader) while fewer than coalesceBytes are queued,
// and on set(false) making the queued bytes readable again at once.
func TestCoalescerHoldsReadinessUntilEnoughBytesAreQueued(t *testing.T) {
	client, server := tcpPair(t)
	co := newCoalescer(server)
	if !co.set(true) || !co.on {
		t.Fatal("set(true) did not turn coalescing on (SO_RCVLOWAT refused?)")
	}
	if co.set(true) {
		t.Error("set(true) twice reported a change")
	}
	if _, err := client.Write(bytes.Repeat([]byte("x"), 100)); err != nil {
		t.Fatal(err)
	}
	if readable(t, server, 200) {
		t.Fatal("socket readable with 100 bytes queued while coalescing; the reader would be woken per message")
	}
	if !co.set(false) {
		t.Fatal("set(false) reported no change")
	}
	if !readable(t, server, 1000) {
		t.Fatal("queued bytes not readable after coalescing was turned off")
	}
	buf := make([]byte, 2*coalesceBytes)
	if n, err := server.Read(buf); err != nil || n != 100 {
		t.Fatalf("read %d bytes (%v), want the 100 queued", n, err)
	}

	co.set(true)
	if _, err := client.Write(bytes.Repeat([]byte("y"), coalesceBytes)); err != nil {
		t.Fatal(err)
	}
	if !readable(t, server, 1000) {
		t.Fatalf("socket not readable with %d bytes queued while coalescing", coalesceBytes)
	}
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	return connPair(t, "tcp", "127.0.0.1:0")
}

// connPair returns both ends of a connection through a listener on
// network and address, closed when the test ends.
func connPair(t *testing.T, network, address string) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen(network, address)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial(network, ln.Addr().String())
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

// Under sslmode=require pgconn's connection is a *tls.Conn: the coalescer
// reaches the TCP socket beneath it. A connection without a socket (a
// pipe) leaves reads eager and set does nothing.
func TestCoalescerFindsTheSocketUnderTLSAndIgnoresConnectionsWithoutOne(t *testing.T) {
	client, _ := tcpPair(t)
	co := newCoalescer(tls.Client(client, &tls.Config{ServerName: "localhost"}))
	if co.raw == nil || !co.set(true) {
		t.Fatal("coalescing not available on a TLS connection over TCP")
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	co = newCoalescer(p1)
	if co.set(true) || co.on {
		t.Fatal("set(true) on a pipe reported coalescing on")
	}
}

// Linux ignores SO_RCVLOWAT when it reports a Unix-domain socket readable,
// and a read returns what is queued: a stream connected through one
// (host=/var/run/postgresql) reads eagerly, as without coalescing, and
// never waits for bytes that are not coming.
func TestCoalescerOnAUnixSocketLeavesReadsEager(t *testing.T) {
	client, server := connPair(t, "unix", t.TempDir()+"/s")
	newCoalescer(server).set(true)
	if _, err := client.Write(bytes.Repeat([]byte("x"), 100)); err != nil {
		t.Fatal(err)
	}
	if !readable(t, server, 1000) {
		t.Fatal("a Unix-domain socket with 100 bytes queued is not readable while coalescing")
	}
	buf := make([]byte, 1024)
	if n, err := server.Read(buf); err != nil || n != 100 {
		t.Fatalf("read %d bytes (%v), want the 100 queued", n, err)
	}
}
