package replication

import (
	"net"
	"syscall"

	"github.com/walpost/walpost/internal/rawnet"
)

// coalescer makes the kernel hold back wake-ups of the reader while it is
// behind the server: with SO_RCVLOWAT set, the socket reports itself
// readable (and the WAL sender's send wakes the reader) only once that
// many bytes are queued, instead of once per message.
type coalescer struct {
	raw syscall.RawConn // nil: the connection does not support it
	on  bool
}

func newCoalescer(c net.Conn) *coalescer {
	sc, ok := rawnet.Socket(c).(syscall.Conn)
	if !ok {
		return &coalescer{}
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return &coalescer{}
	}
	return &coalescer{raw: raw}
}

// set turns coalescing on or off; it reports whether the state changed.
func (c *coalescer) set(on bool) bool {
	if c.raw == nil || c.on == on {
		return false
	}
	n := 1
	if on {
		n = coalesceBytes
	}
	var serr error
	if err := c.raw.Control(func(fd uintptr) { serr = setRcvLowat(fd, n) }); err != nil || serr != nil {
		c.raw = nil // not supported here; read eagerly from now on
		return false
	}
	c.on = on
	return true
}
