//go:build !linux

package rawnet

import "syscall"

// rawSyscalls: Wrap returns connections as they are here.
const rawSyscalls = false

func rawRead(uintptr, []byte) (int, syscall.Errno)  { return 0, syscall.ENOTSUP }
func rawWrite(uintptr, []byte) (int, syscall.Errno) { return 0, syscall.ENOTSUP }
