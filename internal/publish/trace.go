package publish

import (
	"time"

	"github.com/walpost/walpost/internal/message"
)

// Tracer records one sink's deliveries as trace spans (internal/tracing;
// docs/operations.md, "Tracing"). RunnerOptions.Trace is nil when tracing
// is off, and the runner then calls nothing: the hot path pays one nil
// check per batch and per ack.
//
// The runner calls it from its goroutine only, after the fact: a Tracer
// records what happened and must neither block nor fail (it never delays
// or stops a delivery). The slices it is given are the runner's and must
// not be kept after the call returns.
type Tracer interface {
	// Batch: the runner took batch from its channel and starts publishing
	// it (the first Publish call of its messages is now).
	Batch(batch []Delivery)
	// Retry: the Publish call of msgs (attempt, from 1) failed with err;
	// the messages not durable are sent again after wait.
	Retry(msgs []*message.Message, attempt int, err error, wait time.Duration)
	// Acked: the sink made batch durable, and the runner acks it (the
	// broker's acknowledgement: the end of each message's publish span).
	Acked(batch []Delivery)
	// Refused: the sink refused d for good with err, and the runner hands
	// it to RunnerOptions.Refused (parked in the dead-letter table).
	Refused(d Delivery, err error)
	// Held: d was parked behind its held key (RunnerOptions.Hold) instead
	// of being published.
	Held(d Delivery)
}
