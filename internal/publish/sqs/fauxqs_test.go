package sqs

import (
	"fmt"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/awsbatch/fauxqs"
	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/publish/sqs/sqsfake"
)

// readFauxqs returns what queue of fauxqs held so far (Drain), mapped
// back to outbox messages as readQueue does.
func readFauxqs(t testing.TB, fq *fauxqs.Server, queue string, fifo bool) []*message.Message {
	t.Helper()
	var out []*message.Message
	for _, m := range fq.Drain(t, queue) {
		out = append(out, asMessage(t, sqsfake.Message{Body: m.Body, Attributes: m.Attributes, GroupID: m.GroupID, DedupID: m.DedupID}, fifo))
	}
	return out
}

// fauxqsHarness runs the suite against queues of one fauxqs, the
// independent emulator: a queue per subtest, the outage a cut of the
// proxy in front of it. A FIFO queue keeps order per group only, and
// fauxqs hands a standard queue's messages out in no promised order.
func fauxqsHarness(t *testing.T, fifo bool) sinktest.Harness {
	fq := fauxqs.Start(t)
	n := 0
	return sinktest.Harness{
		Features: sinktest.Features{BinaryPayload: true, MaxPayload: 200 << 10},
		NoRefusal: "fauxqs refuses no entry on demand (a message over 256 KiB is refused by the sink before sending): " +
			"the stand-in's conformance run proves OrderPerKeyUnderRefusal",
		Open: func(t *testing.T) *sinktest.Target {
			n++
			q := fmt.Sprintf("walpost-conformance-%d", n)
			if fifo {
				q += ".fifo"
			}
			fq.CreateQueue(t, q, nil)
			return &sinktest.Target{
				Sink:   newSinkAt(t, fq.URL(), q),
				Read:   func(t testing.TB) []*message.Message { return readFauxqs(t, fq, q, fifo) },
				Outage: fq.Outage,
			}
		},
	}
}

// TestIntegrationConformanceFIFOOnFauxqs runs the conformance suite
// against a FIFO queue of fauxqs, an SQS emulator the project did not
// write (skipped, saying why, where it cannot be installed).
func TestIntegrationConformanceFIFOOnFauxqs(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, fauxqsHarness(t, true))
}

// TestIntegrationConformanceStandardOnFauxqs runs the suite against a
// standard queue of fauxqs.
func TestIntegrationConformanceStandardOnFauxqs(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, fauxqsHarness(t, false))
}

// TestIntegrationRefusedEntryKeepsItsGroupBehindItOnFauxqs: fauxqs
// refuses an entry over the queue's MaximumMessageSize (1024 here, under
// max_message_bytes) and stores the entries after it, of its group too.
// The refused message is Rejected; nothing of its group after it was
// sent; once the queue takes it, the group holds its messages in order.
func TestIntegrationRefusedEntryKeepsItsGroupBehindItOnFauxqs(t *testing.T) {
	t.Parallel()
	fq := fauxqs.Start(t)
	q := fq.CreateQueue(t, "walpost-refused.fifo", map[string]string{"MaximumMessageSize": "1024"})
	s := newSinkAt(t, fq.URL(), q)
	g := sinktest.NewGen(11)
	a1, b1, a2, b2, a3 := g.Message("a"), g.Message("b"), g.SizedMessage("a", 2000), g.Message("b"), g.Message("a")
	msgs := []*message.Message{a1, b1, a2, b2, a3}
	err := s.Publish(sinktest.Context(t, 10*time.Second), msgs)
	if !publish.IsRejected(err) {
		t.Fatalf("got %v, want a2 Rejected", err)
	}
	done, _ := publish.DoneOf(err)
	if fmt.Sprint(done) != "[true true false true false]" {
		t.Fatalf("done %v, want a1, b1, b2", done)
	}
	fq.SetQueueAttributes(t, q, map[string]string{"MaximumMessageSize": "262144"})
	if err := s.Publish(sinktest.Context(t, 10*time.Second), []*message.Message{a2, a3}); err != nil {
		t.Fatal(err)
	}
	var a []string
	for _, m := range readFauxqs(t, fq, q, true) {
		if m.Key == "a" {
			a = append(a, m.ID)
		}
	}
	if want := fmt.Sprint([]string{a1.ID, a2.ID, a3.ID}); fmt.Sprint(a) != want {
		t.Fatalf("group a holds %v, want %s", a, want)
	}
}
