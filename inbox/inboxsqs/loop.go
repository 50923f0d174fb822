package inboxsqs

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/walpost/walpost/inbox"
)

// Defaults of Options.
const (
	DefaultMaxMessages       = 10
	DefaultWaitTime          = 20 * time.Second
	DefaultVisibilityTimeout = 30 * time.Second
	DefaultSettleTimeout     = 30 * time.Second
)

// Attribute names the sqs sink sets that carry the outbox id.
const (
	AttrID           = "id"
	AttrCloudEventID = "ce-id"
)

// API is the part of the SQS client Loop uses; *sqs.Client satisfies it.
type API interface {
	// ReceiveMessage returns up to MaxNumberOfMessages messages, made
	// invisible for VisibilityTimeout, waiting up to WaitTimeSeconds.
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	// DeleteMessage removes the message a receipt handle was given for.
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	// ChangeMessageVisibility sets how long from now the message stays
	// invisible (0: visible at once).
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

// Options configures Loop. The zero value is usable.
type Options struct {
	// MaxMessages is the most messages one receive returns, 1..10; zero
	// means DefaultMaxMessages (10).
	MaxMessages int
	// WaitTime is the long poll of a receive, 0..20s; zero means
	// DefaultWaitTime (20s). It is rounded to whole seconds.
	WaitTime time.Duration
	// VisibilityTimeout is how long a received message stays invisible,
	// and what the loop extends it by, every half of it, while the
	// message waits for or runs its effect (1s..12h, whole seconds); zero
	// means DefaultVisibilityTimeout (30s).
	VisibilityTimeout time.Duration
	// RetryBackoff is the longest time a message whose Process failed
	// stays invisible before SQS hands it out again: inbox.Backoff of its
	// receive count (100ms doubling, rounded up to whole seconds), at most
	// this. Zero means inbox.DefaultRetryBackoff (30s). The queue's
	// redrive policy (maxReceiveCount) dead-letters a message that fails
	// that often: size it for the outages to ride out.
	RetryBackoff time.Duration
	// SettleTimeout bounds each DeleteMessage and ChangeMessageVisibility
	// call, which run even after ctx ended. Zero means
	// DefaultSettleTimeout (30s).
	SettleTimeout time.Duration
	// ID returns a message's id for the inbox; nil reads the attribute id,
	// else ce-id (what walpost's sqs sink sets).
	ID func(msg types.Message) string
	// OnError, when set, is called for every message not processed and
	// deleted (the error of Process, of the delete after the commit, of a
	// visibility change), and with a zero Message for a receive that
	// failed and is retried. Calls never overlap, but the one for a
	// failed extension of visibility comes from the loop's heartbeat
	// goroutine. It must not block for long.
	OnError func(msg types.Message, err error)
	// OnDeleted, when set, is called after a message was deleted, with
	// what Process did: inbox.Processed or inbox.Duplicate.
	OnDeleted func(msg types.Message, res inbox.Result)
	// ClaimCheck, when set (inbox.WithClaimCheck), resolves claim-checked
	// messages (walpost's relay.claim_check): in Process, before the
	// effect, the loop fetches the payload the message's
	// walpost-claim-check headers name, checks its size and SHA-256, and
	// hands the effect the message with the payload as its body (base64, with body-encoding: base64, as Payload reads it). A
	// fetch that fails or does not match counts as a failing effect. A
	// duplicate fetches nothing.
	ClaimCheck *inbox.ClaimCheck
}

func (o Options) withDefaults() (Options, error) {
	bad := func(field string, v any) (Options, error) {
		return o, fmt.Errorf("%w: inboxsqs.Options.%s: %v is out of range", inbox.ErrInvalidOptions, field, v)
	}
	switch {
	case o.MaxMessages == 0:
		o.MaxMessages = DefaultMaxMessages
	case o.MaxMessages < 1 || o.MaxMessages > 10:
		return bad("MaxMessages", o.MaxMessages)
	}
	switch {
	case o.WaitTime == 0:
		o.WaitTime = DefaultWaitTime
	case o.WaitTime < 0 || o.WaitTime > 20*time.Second:
		return bad("WaitTime", o.WaitTime)
	}
	switch {
	case o.VisibilityTimeout == 0:
		o.VisibilityTimeout = DefaultVisibilityTimeout
	case o.VisibilityTimeout < time.Second || o.VisibilityTimeout > 12*time.Hour:
		return bad("VisibilityTimeout", o.VisibilityTimeout)
	}
	var err error
	if o.RetryBackoff, err = inbox.CheckRetry("inboxsqs", o.RetryBackoff, 0); err != nil {
		return o, err
	}
	switch {
	case o.SettleTimeout == 0:
		o.SettleTimeout = DefaultSettleTimeout
	case o.SettleTimeout < 0:
		return bad("SettleTimeout", o.SettleTimeout)
	}
	if o.ID == nil {
		o.ID = MessageID
	}
	return o, nil
}

// MessageID returns the outbox id walpost's sqs sink put in msg: the
// attribute id, else ce-id; "" when neither is there.
func MessageID(msg types.Message) string {
	for _, name := range []string{AttrID, AttrCloudEventID} {
		if a, ok := msg.MessageAttributes[name]; ok && a.StringValue != nil {
			return *a.StringValue
		}
	}
	return ""
}

// seconds rounds d up to whole seconds, at least min.
func seconds(d time.Duration, min int32) int32 {
	return max(min, int32(math.Ceil(d.Seconds())))
}

// Loop receives messages from the queue at queueURL and runs effect once
// per message id through p (an *inbox.Inbox or *inbox.SQLInbox), until
// ctx ends or receiving fails for good:
//
//   - It receives up to Options.MaxMessages with a long poll, each
//     invisible for Options.VisibilityTimeout, and extends the visibility
//     of those not yet settled every half of it, while they wait and while
//     their effects run.
//   - For each message, in the order received, it calls p.Process with
//     the message id (Options.ID: the attribute id by default) and
//     effect. Only after Process returned inbox.Processed or
//     inbox.Duplicate — the effect and the id committed, or committed
//     before — does it delete the message.
//   - When Process fails (nothing was recorded), or the message has no
//     id (inbox.ErrEmptyID), it sets the message's visibility to
//     inbox.Backoff of its receive count (at most Options.RetryBackoff),
//     so that SQS hands it out again after that, and gives back at once
//     the batch's later messages of its FIFO message group, which keeps
//     the group's order. The queue's redrive policy dead-letters a
//     message after maxReceiveCount receives.
//   - A delete that fails after the commit leaves the message to come
//     back; its copy is found a Duplicate and deleted then.
//
// Failures of single messages go to Options.OnError and the loop goes
// on. A receive that fails for a reason that may pass (network, a server
// fault, throttling) is reported to OnError and retried after a backoff;
// one the request caused (the queue does not exist, access denied) ends
// Loop with the error. When ctx ends, the messages received but not yet
// processed are made visible again and Loop returns ctx.Err(). Invalid
// options, or a nil client, processor or effect, give an error wrapping
// inbox.ErrInvalidOptions. The client's own retries apply to each call.
func Loop[Tx any](ctx context.Context, api API, queueURL string, p inbox.Processor[Tx],
	effect func(ctx context.Context, tx Tx, msg types.Message) error, opts Options) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if api == nil || p == nil || effect == nil || queueURL == "" {
		return fmt.Errorf("%w: inboxsqs.Loop needs a client, a queue URL, a processor and an effect", inbox.ErrInvalidOptions)
	}
	l := &loop[Tx]{api: api, url: queueURL, p: p, effect: effect, opts: opts}
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(queueURL),
		MaxNumberOfMessages:         int32(opts.MaxMessages),
		WaitTimeSeconds:             seconds(opts.WaitTime, 0),
		VisibilityTimeout:           seconds(opts.VisibilityTimeout, 1),
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	}
	failures := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		out, err := api.ReceiveMessage(ctx, in)
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			var ae smithy.APIError
			if errors.As(err, &ae) && ae.ErrorFault() == smithy.FaultClient && !throttled(ae.ErrorCode()) {
				return fmt.Errorf("inboxsqs: receiving from %s: %w", queueURL, err)
			}
			failures++
			l.report(types.Message{}, fmt.Errorf("inboxsqs: receiving from %s (retrying): %w", queueURL, err))
			inbox.SleepBackoff(ctx, failures, opts.RetryBackoff)
			continue
		}
		failures = 0
		if len(out.Messages) > 0 {
			l.batch(ctx, out.Messages)
		}
	}
}

// throttled reports whether an error code is SQS throttling, which the
// client is blamed for but passes.
func throttled(code string) bool {
	switch code {
	case "RequestThrottled", "ThrottlingException", "OverLimit", "KmsThrottled":
		return true
	}
	return false
}

// loop is one Loop call's state.
type loop[Tx any] struct {
	reportMu sync.Mutex // serializes OnError
	api      API
	url      string
	p        inbox.Processor[Tx]
	effect   func(ctx context.Context, tx Tx, msg types.Message) error
	opts     Options
}

// batch handles the messages of one receive, in order, keeping the
// visibility of those not settled yet extended meanwhile.
func (l *loop[Tx]) batch(ctx context.Context, msgs []types.Message) {
	var mu sync.Mutex
	pending := map[int]bool{}
	for i := range msgs {
		pending[i] = true
	}
	settled := func(i int) {
		mu.Lock()
		delete(pending, i)
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the heartbeat: extend what is still held
		defer wg.Done()
		t := time.NewTicker(l.opts.VisibilityTimeout / 2)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			mu.Lock()
			held := make([]int, 0, len(pending))
			for i := range pending {
				held = append(held, i)
			}
			mu.Unlock()
			for _, i := range held {
				if err := l.visibility(ctx, msgs[i], seconds(l.opts.VisibilityTimeout, 1)); err != nil {
					l.report(msgs[i], fmt.Errorf("inboxsqs: message %s: extending its visibility: %w", aws.ToString(msgs[i].MessageId), err))
				}
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	failedGroups := map[string]bool{}
	for i, msg := range msgs {
		group := msg.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		switch {
		case ctx.Err() != nil:
			l.release(ctx, msg, 0, nil)
		case group != "" && failedGroups[group]:
			// An earlier message of the group failed: give this one back,
			// to come after it.
			l.release(ctx, msg, 0, nil)
		default:
			if !l.handle(ctx, msg) && group != "" {
				failedGroups[group] = true
			}
		}
		settled(i)
	}
}

// handle processes msg and deletes it, or sets its visibility to the
// backoff; it reports whether Process succeeded.
func (l *loop[Tx]) handle(ctx context.Context, msg types.Message) bool {
	id := l.opts.ID(msg)
	var res inbox.Result
	var err error
	if id == "" {
		err = fmt.Errorf("inboxsqs: message %s: %w (no attribute %s or %s)", aws.ToString(msg.MessageId), inbox.ErrEmptyID, AttrID, AttrCloudEventID)
	} else {
		// Process's span continues the trace of the message's traceparent.
		traced := inbox.ContextFromHeaders(ctx, func(name string) string {
			if a, ok := msg.MessageAttributes[name]; ok {
				return aws.ToString(a.StringValue)
			}
			return ""
		})
		res, err = l.p.Process(traced, id, func(ctx context.Context, tx Tx) error {
			msg, err := l.resolve(ctx, msg)
			if err != nil {
				return err
			}
			return l.effect(ctx, tx, msg)
		})
	}
	if err != nil {
		count, _ := strconv.Atoi(msg.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
		l.release(ctx, msg, seconds(inbox.Backoff(max(1, count), l.opts.RetryBackoff), 1), err)
		return false
	}
	err = l.settle(ctx, func(ctx context.Context) error {
		_, err := l.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(l.url), ReceiptHandle: msg.ReceiptHandle})
		return err
	})
	if err != nil {
		l.report(msg, fmt.Errorf("inboxsqs: message %q: %s, but deleting it failed (it will be delivered again and found a duplicate): %w", id, res, err))
		return true
	}
	if l.opts.OnDeleted != nil {
		l.opts.OnDeleted(msg, res)
	}
	return true
}

// release makes msg visible again after secs seconds and reports cause
// (nil when the message was only given back) and any error of the call.
func (l *loop[Tx]) release(ctx context.Context, msg types.Message, secs int32, cause error) {
	err := l.visibility(ctx, msg, secs)
	if err != nil {
		err = fmt.Errorf("inboxsqs: message %s: changing its visibility: %w", aws.ToString(msg.MessageId), err)
		if cause != nil {
			err = errors.Join(cause, err)
		}
	} else {
		err = cause
	}
	if err != nil {
		l.report(msg, err)
	}
}

func (l *loop[Tx]) visibility(ctx context.Context, msg types.Message, secs int32) error {
	return l.settle(ctx, func(ctx context.Context) error {
		_, err := l.api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(l.url), ReceiptHandle: msg.ReceiptHandle, VisibilityTimeout: secs,
		})
		return err
	})
}

// settle runs a delete or visibility change with its own deadline, even
// when ctx has ended.
func (l *loop[Tx]) settle(ctx context.Context, f func(ctx context.Context) error) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opts.SettleTimeout)
	defer cancel()
	return f(sctx)
}

func (l *loop[Tx]) report(msg types.Message, err error) {
	if l.opts.OnError != nil {
		l.reportMu.Lock()
		defer l.reportMu.Unlock()
		l.opts.OnError(msg, err)
	}
}

// Payload returns the outbox payload walpost's sqs sink put in msg: the
// body, or the body decoded per the attribute body-encoding (base64: a
// payload SQS would not take as text; empty: an empty payload).
func Payload(msg types.Message) ([]byte, error) {
	enc := ""
	if a, ok := msg.MessageAttributes["body-encoding"]; ok && a.StringValue != nil {
		enc = *a.StringValue
	}
	switch enc {
	case "base64":
		return base64.StdEncoding.DecodeString(aws.ToString(msg.Body))
	case "empty":
		return []byte{}, nil
	case "":
		return []byte(aws.ToString(msg.Body)), nil
	}
	return nil, fmt.Errorf("inboxsqs: message %s: unknown body-encoding %q", aws.ToString(msg.MessageId), enc)
}

// resolve returns msg with the payload of its claim check, if any, as its
// body (Options.ClaimCheck).
func (l *loop[Tx]) resolve(ctx context.Context, msg types.Message) (types.Message, error) {
	if l.opts.ClaimCheck == nil {
		return msg, nil
	}
	attr := func(name string) string {
		if a, ok := msg.MessageAttributes[name]; ok {
			return aws.ToString(a.StringValue)
		}
		return ""
	}
	if attr(inbox.HeaderClaimCheck) == "" {
		return msg, nil
	}
	data, err := l.opts.ClaimCheck.Resolve(ctx, attr, nil)
	if err != nil {
		return msg, fmt.Errorf("inboxsqs: message %s: %w", aws.ToString(msg.MessageId), err)
	}
	attrs := maps.Clone(msg.MessageAttributes)
	attrs["body-encoding"] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("base64")}
	msg.MessageAttributes = attrs
	msg.Body = aws.String(base64.StdEncoding.EncodeToString(data))
	return msg, nil
}
