package awsbatch

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

// service is a FIFO destination as fauxqs keeps one: it answers every
// entry on its own, storing the entries after a refused one of the same
// group (which SQS and SNS do not rule out), and drops a deduplication id
// it has seen.
type service struct {
	refuse   map[string]bool // bodies refused, per entry
	stored   []string        // bodies, in the order stored
	seen     map[string]bool
	requests [][]string // the bodies of each request
}

func (s *service) SendBatch(_ context.Context, d *Dest, entries []*Entry) (Answer, error) {
	ans := Answer{Stored: map[string]bool{}, Failed: map[string]Failure{}}
	var bodies []string
	for j, e := range entries {
		bodies = append(bodies, e.Body)
		switch {
		case s.refuse[e.Body]:
			ans.Failed[ID(j)] = Failure{Code: "InvalidParameterValue", Message: "Message must be shorter than 1024 bytes.", SenderFault: true}
		case d.FIFO && s.seen[e.Dedup]:
			ans.Stored[ID(j)] = true
		default:
			if s.seen == nil {
				s.seen = map[string]bool{}
			}
			s.seen[e.Dedup] = true
			s.stored = append(s.stored, e.Body)
			ans.Stored[ID(j)] = true
		}
	}
	s.requests = append(s.requests, bodies)
	return ans, nil
}

var testCodes = map[string]Verdict{"InvalidParameterValue": {Permanent: true, Refused: true}}

func testBatcher() *Batcher {
	return &Batcher{Sink: "sqs", Service: "SQS", Noun: "queue", Codes: testCodes, MaxBytes: 256 << 10, Timeout: 5 * time.Second}
}

// call builds a call's messages, one per key given (in order), and its
// destination.
func call(fifo bool, keys ...string) ([]*message.Message, []*Dest) {
	var msgs []*message.Message
	for i, k := range keys {
		msgs = append(msgs, &message.Message{ID: fmt.Sprintf("m%d", i), Type: "t", Key: k, HasKey: true, Payload: []byte(fmt.Sprintf("%s-%d", k, i))})
	}
	return callOf(fifo, msgs)
}

// TestRefusedEntryIsNotOvertakenByItsGroup: of a FIFO queue whose service
// stores a group's entries after a refused one (fauxqs does), the
// refused message, once the service takes it, is still stored before the
// later messages of its key: they are not sent while it is unacknowledged.
func TestRefusedEntryIsNotOvertakenByItsGroup(t *testing.T) {
	b := testBatcher()
	msgs, dests := call(true, "a", "b", "a", "b", "a")
	svc := &service{refuse: map[string]bool{"a-2": true}}
	err := b.Send(context.Background(), svc, dests, len(msgs))
	if !publish.IsRejected(err) {
		t.Fatalf("got %v, want the refusal of a-2 (Rejected)", err)
	}
	done, _ := publish.DoneOf(err)
	var pending []*message.Message
	for i, m := range msgs {
		if !done[i] {
			pending = append(pending, m)
		}
	}
	svc.refuse = nil // the operator raised the queue's limit; the relay sends again what is not done
	_, dests = callOf(true, pending)
	if err := b.Send(context.Background(), svc, dests, len(pending)); err != nil {
		t.Fatal(err)
	}
	var a []string
	for _, body := range svc.stored {
		if body[0] == 'a' {
			a = append(a, body)
		}
	}
	if want := []string{"a-0", "a-2", "a-4"}; !slices.Equal(a, want) {
		t.Fatalf("group a stored as %v, want %v (requests %v)", a, want, svc.requests)
	}
}

// callOf is the destination of a call of msgs.
func callOf(fifo bool, msgs []*message.Message) ([]*message.Message, []*Dest) {
	var ds Dests
	for i, m := range msgs {
		ds.Add("q", "q", fifo, i, m, Entry{Body: string(m.Payload), Size: len(m.Payload)})
	}
	return msgs, ds.List
}

// TestFIFOBatchesHoldOneEntryPerGroup: ten keys fill a FIFO request, one
// key sends one entry a request, a standard queue takes ten of one key.
func TestFIFOBatchesHoldOneEntryPerGroup(t *testing.T) {
	for _, c := range []struct {
		fifo     bool
		keys     int
		requests int
	}{{true, 10, 10}, {true, 1, 100}, {true, 3, 34}, {false, 1, 10}} {
		keys := make([]string, 100)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%d", i%c.keys)
		}
		msgs, dests := call(c.fifo, keys...)
		svc := &service{}
		if err := testBatcher().Send(context.Background(), svc, dests, len(msgs)); err != nil {
			t.Fatal(err)
		}
		if len(svc.requests) != c.requests {
			t.Errorf("fifo %v, %d keys: %d requests for 100 messages, want %d", c.fifo, c.keys, len(svc.requests), c.requests)
		}
		if c.fifo {
			for _, r := range svc.requests {
				seen := map[byte]bool{}
				for _, body := range r {
					k := body[1] // k<digit>-…
					if seen[k] {
						t.Fatalf("a request holds two entries of one group: %v", r)
					}
					seen[k] = true
				}
			}
		}
		if len(svc.stored) != 100 {
			t.Fatalf("%d stored", len(svc.stored))
		}
	}
}
