//go:build !linux

package main

// takeForeground does nothing outside Linux: Ctrl-C reaches make too.
func takeForeground() (restore func()) { return func() {} }
