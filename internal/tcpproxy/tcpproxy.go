// Package tcpproxy is a TCP forwarder for fault tests: it forwards
// connections from a local address to a server, and a test can cut it
// (listener closed, every connection reset: clients see refusals and
// resets, as when the server dies) and restore it on the same address,
// without touching the server (which may be shared by the whole machine).
//
// A Proxy is safe for concurrent use.
package tcpproxy

import (
	"errors"
	"io"
	"net"
	"sync"
)

// ErrClosed is returned by Restore after Close.
var ErrClosed = errors.New("tcpproxy: closed")

// Proxy forwards TCP connections from Addr to a target.
type Proxy struct {
	addr   string
	target string

	mu     sync.Mutex
	ln     net.Listener // nil while cut
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	// thawed is closed by Thaw; non-nil while the proxy is frozen.
	thawed chan struct{}
}

// New listens on a free port of 127.0.0.1 and forwards every connection to
// target (host:port).
func New(target string) (*Proxy, error) {
	p := &Proxy{target: target, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.addr = ln.Addr().String()
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln)
	return p, nil
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed by cut or close
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.ln != ln || p.closed {
			p.mu.Unlock()
			c.Close()
			up.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.conns[up] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

// pipe copies from src to dst; when either side ends, both are closed.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	io.Copy(gate{p, dst}, src)
	p.mu.Lock()
	delete(p.conns, src)
	delete(p.conns, dst)
	p.mu.Unlock()
	src.Close()
	dst.Close()
}

// Addr is the host:port clients connect to.
func (p *Proxy) Addr() string { return p.addr }

// Cut closes the listener (new connections are refused) and resets every
// connection through the proxy.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // a reset, as when a broker dies
		}
		c.Close()
	}
	clear(p.conns)
	if p.thawed != nil { // the held writes fail on the closed connections
		close(p.thawed)
		p.thawed = nil
	}
}

// Restore listens on the proxy's address again.
func (p *Proxy) Restore() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if p.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln)
	return nil
}

// Close cuts the proxy for good and waits for its goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Cut()
	p.wg.Wait()
}
