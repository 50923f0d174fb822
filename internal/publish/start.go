package publish

import "context"

// Starter is an optional ability of a Sink that connects lazily (at its
// first Publish): Start connects now and checks what the configuration
// needs of the destination (a server version, an exchange's type, a
// topic's or queue's existence where that is cheap to ask), so that a
// capability the broker lacks stops the relay at start, before it
// streams, instead of at the first message. The relay calls it once per
// cycle, after opening the sink (it holds the slot: invariant 7) and
// before streaming (docs/design.md, "Start-up checks").
type Starter interface {
	// Start connects and checks the destination. It returns an error
	// marked with Permanent when the destination cannot honour the
	// configuration (the relay stops, exit 1, with the error); any other
	// error (the server cannot be reached now) is logged and the first
	// Publish tries again. What Start connects, the sink may keep for its
	// Publish calls. Start returns promptly when ctx ends.
	Start(ctx context.Context) error
}

// Start runs s's start-up check (Starter), or does nothing when s has
// none.
func Start(ctx context.Context, s Sink) error {
	if st, ok := s.(Starter); ok {
		return st.Start(ctx)
	}
	return nil
}
