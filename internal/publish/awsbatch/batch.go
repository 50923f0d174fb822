package awsbatch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

// MaxEntries is how many entries SQS's SendMessageBatch and SNS's
// PublishBatch take in one request.
const MaxEntries = 10

// Entry is one outbox message in the form both services take.
type Entry struct {
	Body  string
	Attrs map[string]string // String attributes: name → value
	Size  int               // as the services count it: body, attribute names, types and values
	Delay int32             // DelaySeconds (SQS), 0 for none
	// Group and Dedup are MessageGroupId (GroupID of the ordering key)
	// and MessageDeduplicationId (the outbox id) on a FIFO destination,
	// "" on a standard one.
	Group, Dedup string
}

// Dest is the messages of one Publish call bound for one queue or topic,
// in call order, with their entries.
type Dest struct {
	// Addr is what the sink's Sender addresses the destination by (a
	// queue name or URL, a topic ARN); Show is how errors name it (a URL
	// without what could be a credential).
	Addr, Show string
	FIFO       bool
	Msgs       []*message.Message
	Entries    []Entry
	Idx        []int // Idx[i]: the index of Msgs[i] in the call
}

// Dests gathers a call's messages by destination, in the order the
// destinations first appear. The zero value is ready to use.
type Dests struct {
	List []*Dest
	by   map[string]*Dest
}

// Add appends message i of the call, m, with its entry e, to the
// destination addr (created with show and fifo on first use). On a FIFO
// destination it sets e's Group and Dedup.
func (ds *Dests) Add(addr, show string, fifo bool, i int, m *message.Message, e Entry) {
	d := ds.by[addr]
	if d == nil {
		if ds.by == nil {
			ds.by = map[string]*Dest{}
		}
		d = &Dest{Addr: addr, Show: show, FIFO: fifo}
		ds.by[addr] = d
		ds.List = append(ds.List, d)
	}
	if fifo {
		e.Group, e.Dedup = GroupID(m.OrderingKey()), m.ID
	}
	d.Msgs, d.Entries, d.Idx = append(d.Msgs, m), append(d.Entries, e), append(d.Idx, i)
}

// ID is the batch entry id of the j-th entry of a request.
func ID(j int) string { return strconv.Itoa(j) }

// Failure is the service's answer for an entry it did not store.
type Failure struct {
	Code, Message string
	SenderFault   bool
}

// Answer is the service's answer to one batch request, by entry id (ID).
type Answer struct {
	Stored map[string]bool
	Failed map[string]Failure
}

// Sender sends one batch request: a sink's service call.
type Sender interface {
	// SendBatch sends entries to d in one request, entry j with the id
	// ID(j), and returns the service's answer per entry; an error when
	// the request failed as a whole (it may still have stored entries:
	// their resends are deduplicated on a FIFO destination). It is called
	// one request at a time.
	SendBatch(ctx context.Context, d *Dest, entries []*Entry) (Answer, error)
}

// SendFunc is a function that is a Sender.
type SendFunc func(ctx context.Context, d *Dest, entries []*Entry) (Answer, error)

// SendBatch calls f.
func (f SendFunc) SendBatch(ctx context.Context, d *Dest, entries []*Entry) (Answer, error) {
	return f(ctx, d, entries)
}

// errTimeout is the cause of a Send's own deadline.
var errTimeout = errors.New("awsbatch: timeout")

// Batcher sends a sink's calls with one Sender. Its fields say how errors
// read; it holds no state and is safe for concurrent use.
type Batcher struct {
	// Sink is the kind ("sqs"), which starts errors; Service names the
	// service ("SQS"), Noun a destination ("queue").
	Sink, Service, Noun string
	// Codes is the service's table of error codes (ClassifyCode).
	Codes map[string]Verdict
	// MaxBytes is max_message_bytes: no request's entries are larger.
	MaxBytes int
	// Timeout bounds a call (the sink's timeout).
	Timeout time.Duration
	// NotFound is the code table's hint of a destination that does not
	// exist. Such a request error is Rejected (not Permanent) when
	// Template is set: the setting (Setting, e.g. "queue") whose
	// template chose the destination from the message (docs/security.md).
	NotFound, Setting, Template string
}

// Send sends the destinations' messages of a call of n messages, the
// destinations one after another, and returns nil only when the service
// stored every one; else an error marked with publish.Partial (what was
// stored) and, of the destinations' errors, a permanent one before a
// transient one. When ctx ends, or the call takes longer than Timeout,
// Send returns promptly with an error wrapping ctx.Err().
func (b *Batcher) Send(ctx context.Context, s Sender, dests []*Dest, n int) error {
	ctx, cancel := context.WithTimeoutCause(ctx, b.Timeout, errTimeout)
	defer cancel()
	done := make([]bool, n)
	var first error
	for _, d := range dests {
		err := b.send(ctx, s, d, done, n)
		if err == nil {
			continue
		}
		// A permanent error wins: it is what the operator must act on.
		if first == nil || publish.IsPermanent(err) && !publish.IsPermanent(first) {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return publish.Partial(first, done)
}

// send sends d's messages in batches, one request at a time (see the
// package doc), marks in done those the service stored, and stops at the
// first failure. total is the size of the call, for error messages.
func (b *Batcher) send(ctx context.Context, s Sender, d *Dest, done []bool, total int) error {
	pending := make([]int, len(d.Msgs))
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		batch, rest := b.next(d, pending)
		entries := make([]*Entry, len(batch))
		for j, i := range batch {
			entries[j] = &d.Entries[i]
		}
		ans, err := s.SendBatch(ctx, d, entries)
		if err != nil {
			return b.failed(ctx, err, d, batch, len(pending), total)
		}
		if err := b.settle(d, batch, ans, done); err != nil {
			return err
		}
		pending = rest
	}
	return nil
}

// lookahead bounds how far past the first pending entry next looks for
// entries of other groups to fill a FIFO batch.
const lookahead = 100

// next returns the entries of d to send in the next request, indexes into
// d.Msgs in order, and those left pending, in order: up to MaxEntries and
// MaxBytes of the first pending ones; of a FIFO destination at most one
// entry per message group, the first pending one of each group (the
// package doc, "Order on FIFO destinations"), looking at most lookahead
// entries ahead.
func (b *Batcher) next(d *Dest, pending []int) (batch, rest []int) {
	size := 0
	var taken map[string]bool
	for k, i := range pending {
		e := &d.Entries[i]
		if len(batch) == MaxEntries || k >= lookahead || size+e.Size > b.MaxBytes && len(batch) > 0 {
			return batch, append(rest, pending[k:]...)
		}
		if d.FIFO {
			if taken[e.Group] {
				rest = append(rest, i)
				continue
			}
			if taken == nil {
				taken = make(map[string]bool, MaxEntries)
			}
			taken[e.Group] = true
		}
		size += e.Size
		batch = append(batch, i)
	}
	return batch, rest
}

// settle marks in done the entries of batch that ans reports stored — of
// a FIFO destination, per group, only those before the group's first
// entry not stored — and returns the error of the first entry not stored.
func (b *Batcher) settle(d *Dest, batch []int, ans Answer, done []bool) error {
	first := -1
	var broken map[string]bool
	for j, i := range batch {
		e := &d.Entries[i]
		stored := ans.Stored[ID(j)]
		if stored && (!d.FIFO || !broken[e.Group]) {
			done[d.Idx[i]] = true
			continue
		}
		if d.FIFO {
			if broken == nil {
				broken = map[string]bool{}
			}
			broken[e.Group] = true
		}
		if !stored && first < 0 {
			first = j
		}
	}
	if first < 0 {
		return nil
	}
	f, ok := ans.Failed[ID(first)]
	if !ok {
		f = Failure{Code: "NoResult", Message: b.Service + " reported the entry neither stored nor failed"}
	}
	v := ClassifyCode(b.Codes, f.Code, f.SenderFault)
	err := fmt.Errorf("%s: %s to %s %q: refused by %s (%s: %s)", b.Sink, publish.Describe(d.Msgs[batch[first]]), b.Noun, d.Show, b.Service, f.Code, f.Message)
	if v.Hint != "" {
		err = fmt.Errorf("%w; %s", err, v.Hint)
	}
	return v.Mark(err)
}

// failed turns an error of the request of batch into the error Send
// returns: it names the batch's messages, the destination, and how much
// of the call was not acknowledged (pending of d's, of total), and marks
// it per Classify (a destination a template chose that does not exist is
// Rejected).
func (b *Batcher) failed(ctx context.Context, err error, d *Dest, batch []int, pending, total int) error {
	m := d.Msgs[batch[0]]
	what := publish.Describe(m)
	if n := len(batch); n > 1 {
		last := d.Msgs[batch[n-1]]
		what = fmt.Sprintf("batch of %d messages from %s (lsn %s) to %s (lsn %s)", n, m.ID, m.LSN, last.ID, last.LSN)
	}
	msg := fmt.Sprintf("%s: %s to %s %q", b.Sink, what, b.Noun, d.Show)
	if total > 1 {
		msg += fmt.Sprintf(" (%d of the call's %d messages not acknowledged by the %s)", pending, total, b.Noun)
	}
	if ctx.Err() != nil {
		cause := ctx.Err()
		if errors.Is(context.Cause(ctx), errTimeout) {
			return fmt.Errorf("%s: timeout %s passed: %w (%v)", msg, b.Timeout, cause, err)
		}
		if errors.Is(err, cause) {
			return fmt.Errorf("%s: %w", msg, err)
		}
		return fmt.Errorf("%s: %w (%v)", msg, cause, err)
	}
	v := Classify(b.Codes, err)
	if v.Hint != "" {
		err = fmt.Errorf("%s: %w; %s", msg, err, v.Hint)
	} else {
		err = fmt.Errorf("%s: %w", msg, err)
	}
	if v.Permanent && v.Hint == b.NotFound && b.Template != "" {
		// A destination the message's type or key chose: other messages
		// go elsewhere, and a name a message chose must never stop the
		// relay for good (docs/security.md).
		return publish.Rejected(fmt.Errorf("%w (the %s comes from %s %q: or park the message with relay.on_refused: dead_letter)", err, b.Noun, b.Setting, b.Template))
	}
	return v.Mark(err)
}
