package webhook

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

// A Publish call is sent by up to concurrency lanes. A lane is a
// goroutine that sends one request at a time: it takes the next request
// from the call's schedule, sends it, reports the outcome, and takes the
// next, until the schedule has nothing more for it or one of its
// requests fails (then it stops, after waiting out the answer's
// Retry-After as a single lane does).
//
// The unit of order is the ordering key, message.Message.OrderingKey:
// the outbox key, or the message's own id when the key is NULL (so
// messages without a key are ordered by nothing but themselves, as on a
// Kafka topic, where they go to partitions by id). The schedule holds
// one queue per key, in WAL order, and hands a key to at most one lane
// at a time: a key's next request is taken only once the one before it
// was answered 2xx. Keys are not pinned to a lane: whichever lane is
// free takes the ready key whose next message comes first in the WAL.
// Pinning keys to lanes by a hash would keep the same order, but the
// call ends with its most loaded lane: with 50–100 keys and 32 lanes a
// batch of 1,000 took 58–72 request rounds that way against 32–36 here.
//
// A failed request stops its keys for the rest of the call: their later
// messages are not sent, so what the call delivered of each key is a
// prefix of that key's messages in it (publish.Partial reports exactly
// those), and the retry sends each key's remainder in order. Other keys
// go on: a transient failure or a refusal of one key does not hold up
// the rest of the batch. A Permanent failure (credentials, the endpoint)
// or the end of ctx stops every lane from starting another request;
// requests in flight finish.
//
// With concurrency 1 there is one lane and one queue holding every
// message in WAL order: requests go out one at a time in WAL order and
// the call stops at the first failure, as the sink always did.

// keyQueue is the messages of one ordering key in a Publish call.
type keyQueue struct {
	idx  []int // the positions in the call of the key's messages, in WAL order
	next int   // idx[next] is the first message no request has taken
	pos  int   // its index in the ready heap, -1 when not in it
	// taken marks the queue as part of the request being built.
	taken bool
}

// readyHeap holds the keys whose next message may be sent, the earliest
// in the WAL first.
type readyHeap []*keyQueue

func (h readyHeap) Len() int { return len(h) }
func (h readyHeap) Less(i, j int) bool {
	return h[i].idx[h[i].next] < h[j].idx[h[j].next]
}
func (h readyHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *readyHeap) Push(x any) {
	q := x.(*keyQueue)
	q.pos = len(*h)
	*h = append(*h, q)
}
func (h *readyHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	q.pos = -1
	return q
}

// lane is what one lane owns: the buffer it reads the start of an
// answer's body into.
type lane struct {
	head [4096]byte
}

// post is one request of a Publish call: the positions of its
// messages in the call (in the order sent), the key queues it took them
// from, and, in mode batch, its body.
type post struct {
	idx  []int
	keys []*keyQueue
	body []byte
}

// schedule is the state of one Publish call shared by its lanes; mu
// guards everything but msgs and sink, which are read-only.
type schedule struct {
	sink *Sink
	msgs []*message.Message

	mu       sync.Mutex
	wake     sync.Cond // signalled when a request ends
	ready    readyHeap
	inFlight int  // requests taken and not yet finished
	halt     bool // start no more requests
	done     []bool
	err      error // the failure Publish returns (see worse)
	errAt    int   // the position of err's request's first message
	failures int   // failed requests
}

// newSchedule groups msgs by ordering key (all in one queue with
// concurrency 1).
func newSchedule(s *Sink, msgs []*message.Message) *schedule {
	sc := &schedule{sink: s, msgs: msgs, done: make([]bool, len(msgs))}
	sc.wake.L = &sc.mu
	if s.concurrency == 1 {
		q := &keyQueue{idx: make([]int, len(msgs))}
		for i := range msgs {
			q.idx[i] = i
		}
		heap.Push(&sc.ready, q)
		return sc
	}
	byKey := make(map[string]*keyQueue)
	for i, m := range msgs {
		k := m.OrderingKey()
		q := byKey[k]
		if q == nil {
			q = &keyQueue{}
			byKey[k] = q
			sc.ready = append(sc.ready, q) // in order of first message: a heap already
			q.pos = len(sc.ready) - 1
		}
		q.idx = append(q.idx, i)
	}
	return sc
}

// publishLanes sends msgs with up to s.concurrency lanes (see above) and
// returns nil when every request was answered 2xx; otherwise the worst
// failure, marked with publish.Partial for the messages delivered.
func (s *Sink) publishLanes(ctx context.Context, msgs []*message.Message) error {
	sc := newSchedule(s, msgs)
	n := min(s.concurrency, len(sc.ready))
	if n == 1 {
		sc.run(ctx, &s.lanes[0])
	} else {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { sc.run(ctx, &s.lanes[i]) })
		}
		wg.Wait()
	}
	return sc.result(ctx)
}

// run is one lane: it sends the requests the schedule gives it until
// there are none or one fails.
func (sc *schedule) run(ctx context.Context, ln *lane) {
	for {
		req := sc.take(ctx)
		if req == nil {
			return
		}
		err := sc.sink.sendRequest(ctx, ln, sc.msgs, req)
		sc.finish(ctx, req, err)
		if err != nil {
			return
		}
	}
}

// take returns the next request to send, waiting while every ready key
// is in flight, or nil when there is nothing more to send: every key is
// delivered or stopped, or the call was halted (a Permanent failure, the
// end of ctx).
func (sc *schedule) take(ctx context.Context) *post {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for {
		if ctx.Err() != nil {
			sc.halt = true
		}
		if sc.halt {
			return nil
		}
		if len(sc.ready) > 0 {
			break
		}
		if sc.inFlight == 0 {
			return nil
		}
		sc.wake.Wait()
	}
	sc.inFlight++
	if sc.sink.mode != ModeBatch {
		q := heap.Pop(&sc.ready).(*keyQueue)
		i := q.idx[q.next]
		q.next++
		return &post{idx: []int{i}, keys: []*keyQueue{q}}
	}
	return sc.takeBatch()
}

// takeBatch builds a request of mode batch: the next messages in WAL
// order among the ready keys (several of one key in its order), at most
// batch_size of them and batch_bytes of body unless the first message
// alone is larger, as a JSON array of the file sink's objects. Each
// request gets a body of its own: after a failed request net/http may
// still be reading the body it was given (http.Client.Do). Called with
// mu held and sc.ready not empty.
func (sc *schedule) takeBatch() *post {
	s := sc.sink
	req := &post{}
	b := make([]byte, 0, s.bodyHint)
	b = append(b, '[')
	for len(sc.ready) > 0 && len(req.idx) < s.batchSize {
		q := sc.ready[0]
		i := q.idx[q.next]
		n := len(b)
		if len(req.idx) > 0 {
			b = append(b, ',')
		}
		b = publish.AppendJSONLine(b, sc.msgs[i])
		b = b[:len(b)-1] // the newline
		if len(req.idx) > 0 && len(b)+1 > s.batchBytes {
			b = b[:n]
			break
		}
		req.idx = append(req.idx, i)
		q.next++
		if !q.taken {
			q.taken = true
			req.keys = append(req.keys, q)
		}
		if q.next == len(q.idx) {
			heap.Pop(&sc.ready)
		} else {
			heap.Fix(&sc.ready, 0)
		}
	}
	// The request's keys are in flight: out of the heap until it ends.
	for _, q := range req.keys {
		q.taken = false
		if q.pos >= 0 {
			heap.Remove(&sc.ready, q.pos)
		}
	}
	req.body = append(b, ']')
	s.bodyHint = min(len(req.body), s.batchBytes)
	return req
}

// finish records the outcome of req: its messages delivered and its keys
// ready again, or its keys stopped for the rest of the call and err kept
// when it is the worst so far. A Permanent failure, or the end of ctx,
// halts the call.
func (sc *schedule) finish(ctx context.Context, req *post, err error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.inFlight--
	sc.wake.Broadcast()
	if err == nil {
		for _, i := range req.idx {
			sc.done[i] = true
		}
		for _, q := range req.keys {
			if q.next < len(q.idx) {
				heap.Push(&sc.ready, q)
			}
		}
		return
	}
	sc.failures++
	if sc.err == nil || worse(err, req.idx[0], sc.err, sc.errAt) {
		sc.err, sc.errAt = err, req.idx[0]
	}
	if ctx.Err() != nil || (publish.IsPermanent(err) && !publish.IsRejected(err)) {
		sc.halt = true
	}
}

// severity ranks a failure: what stops the relay, then a refusal (the
// runner looks for the refused message with relay.on_refused), then a
// transient one.
func severity(err error) int {
	switch {
	case publish.IsRejected(err):
		return 1
	case publish.IsPermanent(err):
		return 2
	}
	return 0
}

// worse reports whether err, of the request starting at position at, is
// the one to return rather than other (starting at otherAt): the more
// severe, and of equal severity the earlier in the WAL.
func worse(err error, at int, other error, otherAt int) bool {
	if a, b := severity(err), severity(other); a != b {
		return a > b
	}
	return at < otherAt
}

// result is the call's error: nil when every message was delivered,
// else the worst failure (or the end of ctx, when that halted the call
// before any request failed), marked with publish.Partial for the
// messages delivered. When ctx ended, the error wraps ctx.Err() unless
// it is Permanent.
func (sc *schedule) result(ctx context.Context) error {
	err := sc.err
	if sc.failures > 1 {
		err = fmt.Errorf("%w (%d other requests of this call failed too)", err, sc.failures-1)
	}
	if cerr := ctx.Err(); cerr != nil && !publish.IsPermanent(err) && !errors.Is(err, cerr) {
		first := 0
		for first < len(sc.done) && sc.done[first] {
			first++
		}
		if first == len(sc.done) {
			return nil // every message was delivered before ctx ended
		}
		if err == nil {
			err = fmt.Errorf("webhook: publishing %s: %w", publish.DescribeCall(sc.msgs[first:]), cerr)
		} else {
			err = fmt.Errorf("%w; then %w", err, cerr)
		}
	}
	if err == nil {
		return nil
	}
	return publish.Partial(err, sc.done)
}

// sendRequest sends req: in mode message its one message, with the
// message's headers (a message whose headers cannot be sent is refused
// without a request), in mode batch its body.
func (s *Sink) sendRequest(ctx context.Context, ln *lane, msgs []*message.Message, req *post) error {
	if s.mode == ModeBatch {
		part := make([]*message.Message, len(req.idx))
		for j, i := range req.idx {
			part[j] = msgs[i]
		}
		return s.send(ctx, ln, req.body, s.batchHeader(part), part)
	}
	i := req.idx[0]
	h, err := s.messageHeader(msgs[i])
	if err != nil {
		return err
	}
	return s.send(ctx, ln, msgs[i].Payload, h, msgs[i:i+1])
}
