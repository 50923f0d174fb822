//go:build race

package tracing

// raceEnabled: the race detector's instrumentation allocates on its own,
// so allocation counts mean nothing under it.
const raceEnabled = true
