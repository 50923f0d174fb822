package replication

import (
	"net"
	"syscall"

	"github.com/walpost/walpost/internal/rawnet"
)

// EnvCoalesce is the switch of coalesced reads: WALPOST_COALESCE=off
// leaves SO_RCVLOWAT alone, so that the socket wakes the reader per
// message as it would without the stream's help (see coalescer).
const EnvCoalesce = "WALPOST_COALESCE"

// coalesceSwitch is EnvCoalesce as the process started with it.
var coalesceSwitch = rawnet.EnvSwitch(EnvCoalesce)

// coalescer makes the kernel hold back wake-ups of the reader while it is
// behind the server: with SO_RCVLOWAT set, the socket reports itself
// readable (and the WAL sender's send wakes the reader) only once that
// many bytes are queued, instead of once per message.
//
// Switched off (WALPOST_COALESCE=off), it keeps the state the stream asks
// for and reports it, so that the stream still knows it is behind (and
// sends status updates every pollBehind), but it never touches the socket:
// reads stay eager, as through net.Conn alone.
type coalescer struct {
	raw syscall.RawConn // nil: the connection does not support it
	off bool            // switched off: the state is kept, the socket left alone
	on  bool
}

func newCoalescer(c net.Conn) *coalescer {
	if !coalesceSwitch.On {
		return &coalescer{off: true}
	}
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
	if c.on == on {
		return false
	}
	if c.off {
		c.on = on
		return true
	}
	if c.raw == nil {
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
