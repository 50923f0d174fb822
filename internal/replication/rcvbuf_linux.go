//go:build linux

package replication

import (
	"time"

	"golang.org/x/sys/unix"
)

// tcpRTT returns the round trip of the TCP socket fd (TCP_INFO): the
// smallest seen, or the smoothed one where the kernel has no minimum; 0
// when unknown. The minimum, because a sample of the few taken during the
// connection's startup can include the server's own delay (a backend
// busy forking, a delayed ACK) and say nothing about the link.
func tcpRTT(fd uintptr) time.Duration {
	info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0
	}
	us := info.Min_rtt
	if us == 0 || us == ^uint32(0) {
		us = info.Rtt
	}
	return time.Duration(us) * time.Microsecond
}
