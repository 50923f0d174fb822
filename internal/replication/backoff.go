package replication

import (
	"time"

	"github.com/walpost/walpost/internal/backoff"
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

// jitter returns d ±25% (backoff.Between): the wait before a slot held by
// another process is tried again.
func jitter(d time.Duration) time.Duration { return backoff.Between(d-d/4, d+d/4) }
