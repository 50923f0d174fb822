//go:build linux

package replication

import (
	"time"

	"golang.org/x/sys/unix"
)

// tcpRTT returns the smoothed round trip of the TCP socket fd (TCP_INFO),
// or 0.
func tcpRTT(fd uintptr) time.Duration {
	info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0
	}
	return time.Duration(info.Rtt) * time.Microsecond
}
