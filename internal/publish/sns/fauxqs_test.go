package sns

import (
	"fmt"
	"testing"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/awsbatch/fauxqs"
	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/publish/sns/snsfake"
)

// fauxqsHarness runs the suite against topics of one fauxqs, the
// independent emulator: a topic per subtest, read through the SQS queue
// subscribed to it with raw delivery (a FIFO queue for a FIFO topic), the
// outage a cut of the proxy in front of it.
func fauxqsHarness(t *testing.T, fifo bool) sinktest.Harness {
	fq := fauxqs.Start(t)
	n := 0
	return sinktest.Harness{
		Features: sinktest.Features{BinaryPayload: true, MaxPayload: 200 << 10},
		NoRefusal: "fauxqs refuses no entry on demand (a message over 256 KiB is refused by the sink before sending): " +
			"the stand-in's conformance run proves OrderPerKeyUnderRefusal",
		Open: func(t *testing.T) *sinktest.Target {
			n++
			name := fmt.Sprintf("walpost-conformance-%d", n)
			if fifo {
				name += ".fifo"
			}
			arn := fq.CreateTopic(t, name)
			return &sinktest.Target{
				Sink: newSinkAt(t, fq.URL(), arn),
				Read: func(t testing.TB) []*message.Message {
					var stored []snsfake.Message
					for _, m := range fq.Drain(t, name) {
						stored = append(stored, snsfake.Message{Body: m.Body, Attributes: m.Attributes, GroupID: m.GroupID, DedupID: m.DedupID})
					}
					return asMessages(t, stored, fifo)
				},
				Outage: fq.Outage,
			}
		},
	}
}

// TestIntegrationConformanceFIFOOnFauxqs runs the conformance suite
// against a FIFO topic of fauxqs, an SNS emulator the project did not
// write, fanned out to a FIFO queue (skipped, saying why, where fauxqs
// cannot be installed).
func TestIntegrationConformanceFIFOOnFauxqs(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, fauxqsHarness(t, true))
}

// A standard topic is not run against fauxqs: it publishes a
// PublishBatch's entries in the order their form fields first appear,
// and the SDK's form has them sorted as text (member.10 before member.2),
// so a batch of ten is stored out of order (docs/testing.md). A FIFO
// request holds one entry per group (awsbatch), so that order does not
// matter there.
