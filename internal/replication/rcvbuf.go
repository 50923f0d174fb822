package replication

import (
	"net"
	"syscall"
	"time"

	"github.com/walpost/walpost/internal/rawnet"
)

// EnvReceiveBuffer is the switch of the receive buffer's sizing:
// WALPOST_RCVBUF=off leaves SO_RCVBUF to the kernel's autotuning whatever
// postgres.receive_buffer says, as receive_buffer: kernel does.
const EnvReceiveBuffer = "WALPOST_RCVBUF"

// rcvbufSwitch is EnvReceiveBuffer as the process started with it.
var rcvbufSwitch = rawnet.EnvSwitch(EnvReceiveBuffer)

const (
	// autoReceiveBuffer is the receive buffer StreamOptions.ReceiveBuffer
	// 0 (auto) sets on a link whose round trip is at most autoMaxRTT.
	// Linux doubles it for its own bookkeeping: at 250 µs that still lets
	// 500 MB/s through, more than a WAL sender sends.
	autoReceiveBuffer = 64 << 10
	autoMaxRTT        = 250 * time.Microsecond
)

// receiveBuffer is what sizeReceiveBuffer did to a socket.
type receiveBuffer struct {
	set int           // SO_RCVBUF set, in bytes; 0: the kernel's autotuning kept
	rtt time.Duration // the TCP round trip at connect, as tcpRTT gives it (0: not TCP, or unknown)
}

// sizeReceiveBuffer sizes the receive buffer of c's socket (through TLS)
// as want says: 0 auto (autoReceiveBuffer on a TCP connection whose
// smallest round trip seen (tcpRTT) is at most autoMaxRTT, else nothing), -1 nothing,
// n > 0 n bytes; with WALPOST_RCVBUF=off, nothing whatever want says.
//
// Why (docs/design.md, "Reading a backlog"): while a backlog is read, the
// WAL sender is the bottleneck, and with an open TCP window it sends each
// message in a segment of its own, paying for the whole loopback path
// (its send, the receiver's processing, the ACK) per message. A small
// buffer closes the window while the relay decodes: the WAL sender's
// sends then only queue bytes into large segments, which go out when the
// relay reads and reopens the window (the kernel does that work in the
// relay's context), and the WAL sender decodes a backlog faster: how much
// faster depends on the machine (BENCHMARKS.md, "What each optimisation
// bought"). On a slow link a small window would cap the rate (window /
// round trip), hence auto's bound on the round trip.
func sizeReceiveBuffer(c net.Conn, want int) receiveBuffer {
	tcp, ok := rawnet.Socket(c).(*net.TCPConn)
	if !ok {
		return receiveBuffer{}
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return receiveBuffer{}
	}
	var rb receiveBuffer
	_ = raw.Control(func(fd uintptr) {
		rb.rtt = tcpRTT(fd)
		n := want
		if !rcvbufSwitch.On {
			n = -1
		}
		switch {
		case n < 0:
			return
		case n == 0:
			if rb.rtt <= 0 || rb.rtt > autoMaxRTT {
				return
			}
			n = autoReceiveBuffer
		}
		if syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n) == nil {
			rb.set = n
		}
	})
	return rb
}
