// Package testutil holds the small helpers that tests of every kind share
// and that need nothing of walpost: a buffer a process or a logger writes
// while the test reads it. It is imported only by tests and test-support
// packages (relaytest, sinktest, sbfake); helpers about sinks live in
// publish/sinktest, about relay processes in relaytest.
package testutil

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent use: a process's or a
// logger's output, read by a test while it is written. The zero value is
// an empty buffer without limit.
type Buffer struct {
	// Max, when not 0, bounds what is kept: once Max bytes are kept,
	// later writes are dropped (and reported written), so that a chatty
	// process cannot fill the memory of a long test.
	Max int

	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Max > 0 && b.b.Len() >= b.Max {
		return len(p), nil
	}
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Len returns how many bytes were kept so far.
func (b *Buffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Len()
}

// Reset empties the buffer.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Reset()
}
