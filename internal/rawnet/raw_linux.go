//go:build linux

package rawnet

import (
	"syscall"
	"unsafe"
)

// rawSyscalls: Conn reads and writes with raw system calls here.
const rawSyscalls = true

// rawRead reads from the non-blocking socket fd without telling the
// runtime (it never blocks).
func rawRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}

// rawWrite writes to the non-blocking socket fd without telling the
// runtime (it never blocks).
func rawWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}
