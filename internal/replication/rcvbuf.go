package replication

import (
	"net"
	"time"

	"github.com/walpost/walpost/internal/rawnet"
)

// receiveBuffer is what sizeReceiveBuffer did to a socket.
type receiveBuffer struct {
	set int           // SO_RCVBUF set, in bytes; 0: the kernel's autotuning kept
	rtt time.Duration // the TCP round trip at connect, as tcpRTT gives it (0: not TCP, or unknown)
}

// sizeReceiveBuffer sizes the receive buffer of c's socket (through TLS)
// as want says: n > 0 sets n bytes (net.TCPConn.SetReadBuffer); 0 leaves
// it to the kernel's autotuning. It also reads the
// TCP round trip at connect, for the streaming log line.
//
// auto set 64 KiB on loopback-like links until issue 24: a small buffer
// closed the TCP window while the relay decoded, so the WAL sender queued
// bytes into large segments instead of one per message. Two full bench
// runs (2026-12-04) showed no end-to-end gain from it (BENCHMARKS.md,
// "What each optimisation bought"), so auto now means the kernel's
// sizing; an operator's explicit size is still honoured while
// postgres.receive_buffer, deprecated by issue 34, is accepted.
func sizeReceiveBuffer(c net.Conn, want int) receiveBuffer {
	tcp, ok := rawnet.Socket(c).(*net.TCPConn)
	if !ok {
		return receiveBuffer{}
	}
	var rb receiveBuffer
	if raw, err := tcp.SyscallConn(); err == nil {
		_ = raw.Control(func(fd uintptr) { rb.rtt = tcpRTT(fd) })
	}
	if want > 0 && tcp.SetReadBuffer(want) == nil {
		rb.set = want
	}
	return rb
}
