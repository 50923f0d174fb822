package replication

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

// rawConn is the replication connection's socket, read and written with
// raw system calls, for what a message costs the relay at low rates
// (bench/NOTES.md, "Where the CPU goes at low rates"). At 1,000 single-row
// transactions/s the relay goes idle between messages, and:
//
//   - every ordinary system call (a read through net.Conn) tells the Go
//     runtime it enters a system call, and the first one after an idle
//     spell wakes the runtime's sysmon thread, which then polls every
//     20 µs until the relay is idle again: a thread wake-up and a few
//     sleeps per message. The socket is non-blocking, so a read or write
//     never blocks and needs no such notice: rawConn makes them as raw
//     system calls through the socket's syscall.RawConn, which still
//     waits for readiness in the runtime's poller and honours deadlines;
//   - a read that returns less than asked emptied the socket, so the next
//     read would return EAGAIN before waiting in the poller: rawConn waits
//     for readiness first instead (the poller is edge-triggered and keeps
//     an event that came in the meantime, so no wake-up is lost).
//
// expire makes reads fail at once with a timeout (as a past read deadline
// does) without touching the socket's deadline, and setReadDeadline sets
// the socket's deadline only when it changes: the runtime's timer is not
// removed and added back around every poll of the buffered bytes.
//
// Read and Write are used by one goroutine each; the deadline methods and
// expire are safe for concurrent use.
type rawConn struct {
	net.Conn // the socket: Close, addresses; deadlines through the methods below
	rc       syscall.RawConn

	drained bool        // the last read emptied the socket (the reading goroutine's)
	expired atomic.Bool // reads fail at once with a timeout

	mu       sync.Mutex
	deadline time.Time // the socket's read deadline as last set
}

// newRawConn returns c wrapped in a rawConn, or c itself where raw system
// calls are not available (no socket underneath, not Linux).
func newRawConn(c net.Conn) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok || !rawSyscalls {
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	return &rawConn{Conn: c, rc: rc}
}

// NetConn returns the socket (the coalescer sets its options).
func (c *rawConn) NetConn() net.Conn { return c.Conn }

// rawConnOf returns the rawConn under c (through TLS), or nil.
func rawConnOf(c net.Conn) *rawConn {
	for {
		if r, ok := c.(*rawConn); ok {
			return r
		}
		u, ok := c.(interface{ NetConn() net.Conn }) // *tls.Conn
		if !ok {
			return nil
		}
		c = u.NetConn()
	}
}

func (c *rawConn) Read(p []byte) (int, error) {
	if c.expired.Load() {
		return 0, c.opError("read", os.ErrDeadlineExceeded)
	}
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	wait := c.drained // the socket was empty: wait for readiness first
	err := c.rc.Read(func(fd uintptr) bool {
		if wait {
			wait = false
			return false
		}
		for {
			n, errno = rawRead(fd, p)
			if errno != syscall.EINTR {
				return errno != syscall.EAGAIN
			}
		}
	})
	switch {
	case err != nil:
		return 0, c.rawError("read", err)
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	c.drained = n < len(p)
	return n, nil
}

func (c *rawConn) Write(p []byte) (int, error) {
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
func (c *rawConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// rawError names an error of RawConn.Read or Write (a deadline, a closed
// connection) like net.Conn's Read or Write would.
func (c *rawConn) rawError(op string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	return c.opError(op, err)
}

// expire makes reads fail at once with a timeout until the next read
// deadline is set, without touching the socket. It must not be used to
// wake a read that waits: it is for the reading goroutine, between reads.
func (c *rawConn) expire() { c.expired.Store(true) }

// setReadDeadline ends expire and sets the socket's read deadline to t
// unless it is set to t already.
func (c *rawConn) setReadDeadline(t time.Time) error {
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
func (c *rawConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expired.Store(false)
	c.deadline = t
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline sets the socket's read and write deadlines (net.Conn).
func (c *rawConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expired.Store(false)
	c.deadline = t
	return c.Conn.SetDeadline(t)
}
