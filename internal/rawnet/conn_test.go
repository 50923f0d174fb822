package rawnet

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

// pair returns a connected loopback TCP pair: the wrapped client side and
// the plain server side.
func pair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server := <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); server.Close() })
	w := Wrap(c)
	rc, ok := w.(*Conn)
	if !ok {
		if !rawSyscalls {
			t.Skip("raw system calls are Linux only")
		}
		t.Fatalf("Wrap returned %T", w)
	}
	return rc, server
}

func TestReadAndWriteCarryTheBytes(t *testing.T) {
	c, server := pair(t)
	big := make([]byte, 8<<20) // more than the socket buffers: Write waits for room
	for i := range big {
		big[i] = byte(i * 7)
	}
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(server, int64(len(big))))
		got <- b
	}()
	if n, err := c.Write(big); err != nil || n != len(big) {
		t.Fatalf("Write: %d, %v", n, err)
	}
	if b := <-got; string(b) != string(big) {
		t.Fatalf("the server read %d bytes, not what was written", len(b))
	}
	if _, err := server.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := io.ReadAtLeast(c, buf, 5)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("Read: %q, %v", buf[:n], err)
	}
	server.Close()
	if _, err := c.Read(buf); err != io.EOF {
		t.Fatalf("Read after the peer closed: %v, want io.EOF", err)
	}
}

// A read that starts after the socket was emptied and filled again while
// nobody read returns what came, even when the runtime's poller saw it
// come in between (the stall of a read that waits for readiness first).
func TestReadAfterDataCameWhileNobodyReadReturnsIt(t *testing.T) {
	c, server := pair(t)
	buf := make([]byte, 64)
	for i := range 50 {
		if _, err := server.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(buf); err != nil || n != 1 {
			t.Fatalf("round %d, first read: %d, %v", i, n, err)
		}
		if _, err := server.Write([]byte("y")); err != nil {
			t.Fatal(err)
		}
		// Let the scheduler poll the network while nobody reads.
		time.Sleep(time.Millisecond)
		runtime.Gosched()
		start := time.Now()
		if n, err := c.Read(buf); err != nil || n != 1 || buf[0] != 'y' {
			t.Fatalf("round %d, second read: %d %q, %v after %v", i, n, buf[:n], err, time.Since(start))
		}
	}
}

func TestDeadlinesAndExpire(t *testing.T) {
	c, server := pair(t)
	buf := make([]byte, 64)

	_ = c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	start := time.Now()
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
	if d := time.Since(start); d < 25*time.Millisecond {
		t.Fatalf("read returned after %v, before its deadline", d)
	}
	var ne net.Error
	_ = c.SetReadDeadline(time.Time{})
	c.Expire()
	start = time.Now()
	if _, err := c.Read(buf); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("expired read of an empty socket: %v, want a timeout", err)
	}
	if d := time.Since(start); d > 20*time.Millisecond {
		t.Fatalf("expired read waited %v", d)
	}
	if _, err := server.Write([]byte("z")); err != nil {
		t.Fatal(err)
	}
	if !waitFor(func() bool { n, err := c.Read(buf); return err == nil && n == 1 && buf[0] == 'z' }) {
		t.Fatal("expired read does not return what the socket holds")
	}
	// A deadline ends Expire; one that stays the same is not set again,
	// and SetReadDeadline from another goroutine wakes a waiting read.
	if err := c.SetReadDeadlineOnce(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := c.Read(buf); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("read with a deadline an hour away returned: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	_ = c.SetReadDeadline(time.Now())
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("woken read: %v, want a timeout", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SetReadDeadline(now) did not wake the read")
	}
}

func TestOfFindsTheConnUnderTLS(t *testing.T) {
	c, _ := pair(t)
	if Of(c) != c {
		t.Error("Of(the Conn) is not the Conn")
	}
	if Of(tls.Client(c, &tls.Config{})) != c {
		t.Error("Of(tls over the Conn) is not the Conn")
	}
	raw, _ := net.Pipe()
	defer raw.Close()
	if Of(raw) != nil || Wrap(raw) != raw {
		t.Error("a net.Pipe is not a socket: Of must be nil and Wrap must return it as it is")
	}
}

func waitFor(f func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if f() {
			return true
		}
	}
	return false
}

func TestSocketIsTheConnectionAtTheBottom(t *testing.T) {
	c, _ := pair(t)
	tcp := c.NetConn()
	if _, ok := tcp.(*net.TCPConn); !ok {
		t.Fatalf("the Conn's NetConn is %T, want *net.TCPConn", tcp)
	}
	for _, top := range []net.Conn{tcp, c, tls.Client(c, &tls.Config{})} {
		if Socket(top) != tcp {
			t.Errorf("Socket(%T) = %T, want the TCP connection", top, Socket(top))
		}
	}
}
