package tcpproxy

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestFrozenProxyHoldsBytesUntilThawed: while frozen, nothing passes in
// either direction and the connection stays open; after Thaw what was held
// arrives.
func TestFrozenProxyHoldsBytesUntilThawed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(c, c) // echo
		}
	}()
	p, err := New(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 1)
	echo := func(b byte, within time.Duration) error {
		c.SetReadDeadline(time.Now().Add(within))
		_, err := c.Read(buf)
		if err == nil && buf[0] != b {
			t.Fatalf("read %q, want %q", buf[0], b)
		}
		return err
	}
	if _, err := c.Write([]byte("a")); err != nil || echo('a', 5*time.Second) != nil {
		t.Fatal("no echo before the freeze")
	}
	p.Freeze()
	if _, err := c.Write([]byte("b")); err != nil {
		t.Fatalf("write while frozen: %v (the connection must stay open)", err)
	}
	if err := echo('b', 300*time.Millisecond); err == nil {
		t.Fatal("a byte passed the frozen proxy")
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("read while frozen: %v, want a timeout (no FIN, no RST)", err)
	}
	p.Thaw()
	if err := echo('b', 5*time.Second); err != nil {
		t.Fatalf("the held byte did not arrive after Thaw: %v", err)
	}
}
