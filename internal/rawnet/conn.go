// Package rawnet reads and writes a socket with raw system calls, for what
// a message costs the relay at low rates (docs/design.md, "Wake-ups at low
// rates").
//
// At 1,000 single-row transactions/s the relay goes idle between messages,
// and every ordinary system call (a read or write through net.Conn) tells
// the Go runtime it enters a system call; the first one after an idle
// spell wakes the runtime's sysmon thread, which then polls every 20 µs
// until the relay is idle again: a thread wake-up and a few sleeps per
// message, on each connection the message passes (the replication
// connection, a broker's). A socket is non-blocking, so a read or write
// never blocks and needs no such notice: Conn makes them as raw system
// calls through the socket's syscall.RawConn, which still waits for
// readiness in the runtime's poller and honours deadlines.
//
// A read always tries the socket before it waits in the poller, as
// net.Conn's does. Waiting first after a read that emptied the socket
// would save the read that returns EAGAIN, but the runtime forgets a
// readiness event that came in between when the next read starts
// (internal/poll's prepareRead): if the peer then sends nothing more,
// because it waits for the reader, the read waits for ever. (It did: the
// replication stream stopped with a sink cut off and the window full, in
// the five-sink fan-out test.)
//
// What it buys is measured, not assumed: the bench reruns its catch-up and
// 1,000 tx/s rows with raw system calls off, and BENCHMARKS.md ("What each
// optimisation bought", and the bench's "Low-level mechanisms switched
// off") holds the figures.
//
// # Switch
//
// WALPOST_RAWNET=off (EnvRawSyscalls; also false, no or 0) turns raw
// system calls off: Wrap returns every connection as it is, so the
// replication socket and the Kafka sink's broker sockets are read and
// written through net.Conn, the ordinary Go path, and every read deadline
// the replication stream sets is the socket's own. It is read once, when the process
// starts (Setting); the replication stream and each Kafka sink log it at
// info when it is set (Switch.Log). Switch is the type of every low-level
// switch, so that each reads and logs the same way.
package rawnet

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Conn is a socket read and written with raw system calls.
//
// Expire makes the next reads try the socket once and fail with a timeout
// instead of waiting (as a past read deadline does) without touching the
// socket's deadline, and SetReadDeadlineOnce sets the socket's deadline
// only when it changes: the runtime's timer is not removed and added back
// around every poll of what arrived.
//
// Read and Write are used by one goroutine each; the deadline methods and
// Expire are safe for concurrent use.
type Conn struct {
	net.Conn // the socket: Close, addresses; deadlines through the methods below
	rc       syscall.RawConn

	expired atomic.Bool // reads fail with a timeout instead of waiting

	mu       sync.Mutex
	deadline time.Time // the socket's read deadline as last set
}

// Wrap returns c wrapped in a Conn, or c itself where raw system calls
// are not available (no socket underneath, not Linux) or switched off
// (WALPOST_RAWNET=off).
func Wrap(c net.Conn) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok || !rawSyscalls || !rawSwitch.On {
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	return &Conn{Conn: c, rc: rc}
}

// NetConn returns the socket, for its options (as *tls.Conn's does).
func (c *Conn) NetConn() net.Conn { return c.Conn }

// Socket returns the connection at the bottom of c: what is left after
// following NetConn (of *tls.Conn, of Conn) down, normally a
// *net.TCPConn or *net.UnixConn, for its socket options.
func Socket(c net.Conn) net.Conn {
	for {
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return c
		}
		c = u.NetConn()
	}
}

// Of returns the Conn under c (through TLS), or nil.
func Of(c net.Conn) *Conn {
	for {
		if r, ok := c.(*Conn); ok {
			return r
		}
		u, ok := c.(interface{ NetConn() net.Conn }) // *tls.Conn
		if !ok {
			return nil
		}
		c = u.NetConn()
	}
}

// Read reads what the socket holds, up to len(p) bytes, waiting in the
// runtime's poller until it holds something or the read deadline passes
// (after Expire: without waiting).
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	read := func(fd uintptr) bool {
		for {
			n, errno = rawRead(fd, p)
			if errno != syscall.EINTR {
				return errno != syscall.EAGAIN
			}
		}
	}
	var err error
	if c.expired.Load() {
		// One try, without the poller or the socket's deadline.
		err = c.rc.Control(func(fd uintptr) { read(fd) })
		if err == nil && errno == syscall.EAGAIN {
			return 0, c.opError("read", os.ErrDeadlineExceeded)
		}
	} else {
		err = c.rc.Read(read)
	}
	switch {
	case err != nil:
		return 0, c.rawError("read", err)
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes p, waiting in the runtime's poller while the socket's
// buffer is full.
func (c *Conn) Write(p []byte) (int, error) {
	var n int
	var errno syscall.Errno
	err := c.rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			m, e := rawWrite(fd, p[n:])
			switch e {
			case 0:
				n += m
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false // wait until writable, then write the rest
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return n, c.rawError("write", err)
	case errno != 0:
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// opError wraps err as net.Conn's methods do.
func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// rawError names an error of RawConn.Read or Write (a deadline, a closed
// connection) like net.Conn's Read or Write would.
func (c *Conn) rawError(op string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	return c.opError(op, err)
}

// Expire makes reads try the socket once and fail with a timeout when it
// is empty, until the next read deadline is set, without touching the
// socket's deadline. It does not wake a read that waits: it is for the
// reading goroutine, between reads.
func (c *Conn) Expire() { c.expired.Store(true) }

// SetReadDeadlineOnce ends Expire and sets the socket's read deadline to t
// unless it is set to t already.
func (c *Conn) SetReadDeadlineOnce(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expired.Store(false)
	if t.Equal(c.deadline) {
		return nil
	}
	c.deadline = t
	return c.Conn.SetReadDeadline(t)
}

// SetReadDeadline sets the socket's read deadline (net.Conn).
func (c *Conn) SetReadDeadline(t time.Time) error { return c.setRead(t, c.Conn.SetReadDeadline) }

// SetDeadline sets the socket's read and write deadlines (net.Conn).
func (c *Conn) SetDeadline(t time.Time) error { return c.setRead(t, c.Conn.SetDeadline) }

// setRead ends Expire and sets the read deadline to t with set.
func (c *Conn) setRead(t time.Time, set func(time.Time) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expired.Store(false)
	c.deadline = t
	return set(t)
}
