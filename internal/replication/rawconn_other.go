//go:build !linux

package replication

import "syscall"

// rawSyscalls: rawConn is not used here; reads go through net.Conn.
const rawSyscalls = false

func rawRead(uintptr, []byte) (int, syscall.Errno)  { return 0, syscall.ENOTSUP }
func rawWrite(uintptr, []byte) (int, syscall.Errno) { return 0, syscall.ENOTSUP }
