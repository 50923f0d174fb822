package publish

import "context"

// DialContext runs dial, which does not take a context or may not return
// promptly when one ends (a TCP, TLS and protocol handshake bounded only
// by its own timeout), in a goroutine of its own, and returns its result.
// When ctx ends first, DialContext returns at once with ctx.Err() and
// abandons dial: a connection it makes after that is passed to discard
// (which closes it), so that none leaks. discard is called only for a
// result whose error is nil.
func DialContext[T any](ctx context.Context, dial func() (T, error), discard func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := dial()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.err == nil {
				discard(r.v)
			}
		}()
		var zero T
		return zero, ctx.Err()
	}
}
