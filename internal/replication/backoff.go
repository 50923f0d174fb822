package replication

import (
	"math/rand/v2"
	"time"
)

// Backoff bounds (internal/backoff). A reconnect waits BackoffStart
// (jittered) after a connection that streamed, doubling up to
// StreamOptions.MaxBackoff while attempts keep failing; a slot held by
// another process is tried again every StreamOptions.SlotPoll (default
// SlotPoll, postgres.standby_poll; jittered), however long it stays held.
const (
	BackoffStart = 250 * time.Millisecond
	SlotPoll     = time.Second
)

func jitter(d time.Duration) time.Duration { return d*3/4 + rand.N(d/2+1) }
