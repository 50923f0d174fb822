package replication

import (
	"bytes"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// readable polls conn's socket for input for up to ms milliseconds.
func readable(t *testing.T, conn net.Conn, ms int) bool {
	t.Helper()
	raw, err := conn.(*net.TCPConn).SyscallConn()
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()

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
