package sqs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	sqsapi "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/awsbatch"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/publish/nametmpl"
	"github.com/walpost/walpost/internal/redact"
)

func init() {
	publish.Register("sqs", publish.FactoryOf(New))
	publish.RegisterScheduling("sqs", "DelaySeconds, up to 15 minutes ahead, standard queues")
}

// Schedules reports that the sink holds messages back until their
// deliver_at, with DelaySeconds (publish.Scheduler): up to MaxDelay
// ahead, on a standard queue; it refuses a message further ahead, or for
// a FIFO queue, which takes no per-message delay.
func (s *Sink) Schedules() bool { return true }

// MaxDelay is the longest DelaySeconds SQS takes: 15 minutes.
const MaxDelay = 15 * time.Minute

// delaySeconds is m's DelaySeconds at now, rounded up (never early), or
// an error for a delay SQS cannot give: over MaxDelay, or on a FIFO queue.
func delaySeconds(m *message.Message, fifo bool, now time.Time) (int32, error) {
	d := m.Delay(now)
	switch {
	case d <= 0:
		return 0, nil
	case fifo:
		return 0, fmt.Errorf("its deliver_at %s is still to come, and a FIFO queue takes no per-message delay (DelaySeconds); "+
			"send scheduled messages to a standard queue, or park it with relay.on_refused: dead_letter; walpost never sends a message early",
			m.DeliverAt.UTC().Format(time.RFC3339))
	case d > MaxDelay:
		return 0, fmt.Errorf("its deliver_at %s is %s ahead, over the 15 minutes SQS can delay a message (DelaySeconds); "+
			"park it with relay.on_refused: dead_letter (cdc dead-letter resend publishes it when its time comes), or schedule it closer; walpost never sends a message early",
			m.DeliverAt.UTC().Format(time.RFC3339), d.Round(time.Second))
	}
	return int32((d + time.Second - 1) / time.Second), nil
}

// maxCachedURLs bounds the queue URLs the sink remembers (one per queue
// a template reached); the cache starts over beyond it.
const maxCachedURLs = 4096

// API is the part of the SQS client the sink uses; *sqs.Client
// satisfies it.
type API interface {
	GetQueueUrl(ctx context.Context, in *sqsapi.GetQueueUrlInput, optFns ...func(*sqsapi.Options)) (*sqsapi.GetQueueUrlOutput, error)
	SendMessageBatch(ctx context.Context, in *sqsapi.SendMessageBatchInput, optFns ...func(*sqsapi.Options)) (*sqsapi.SendMessageBatchOutput, error)
}

// Sink publishes outbox messages to Amazon SQS (see the package doc).
//
// Publish calls are serialized by the sink (a second caller waits for the
// first); Name and Close are safe to call from any goroutine. Publish is
// not called after Close.
type Sink struct {
	name     string
	log      zerolog.Logger
	queue    *nametmpl.Template // nil when queueURL is set
	queueURL string
	env      envelope.Settings
	maxBytes int
	client   API
	batcher  awsbatch.Batcher

	mu   sync.Mutex // serializes Publish; guards urls
	urls map[string]string

	warned sync.Map // header name + reason → true, once logged
}

var _ publish.Sink = (*Sink)(nil)

// New opens an sqs sink from its configuration: it decodes the kind's
// settings strictly, fills in defaults, validates them (errors name the
// field, e.g. "queue: empty") and loads the default AWS configuration
// (environment, shared files; no request is made). It does not connect:
// the first Publish does, and SQS unreachable then is a transient error,
// not a failed start.
func New(cfg *config.Sink, log zerolog.Logger) (publish.Sink, error) {
	var c sqsConfig
	if err := publish.DecodeSettings(cfg, &c); err != nil {
		return nil, err
	}
	return open(cfg.Name, c, log)
}

// open builds the sink from validated settings.
func open(name string, c sqsConfig, log zerolog.Logger) (*Sink, error) {
	opts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = *c.MaxRetries + 1
				// Throttling codes of SQS the SDK's default list lacks.
				o.Retryables = append(o.Retryables, retry.RetryableErrorCode{Codes: map[string]struct{}{"KmsThrottled": {}, "OverLimit": {}}})
			})
		}),
	}
	if c.Region != "" {
		opts = append(opts, awsconfig.WithRegion(c.Region))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(context.Background(), opts...)
	if err != nil {
		// The shared files' errors name a file and key, never a secret.
		return nil, fmt.Errorf("loading the AWS configuration (environment, shared config files): %w", err)
	}
	if awsCfg.Region == "" {
		return nil, errors.New("region: not set, and the default AWS chain has none (set region, or AWS_REGION)")
	}
	client := sqsapi.NewFromConfig(awsCfg, func(o *sqsapi.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
	})
	s := buildSink(name, c, client, log)
	log.Info().Str("queue", showQueue(c.Queue)).Str("region", awsCfg.Region).Str("endpoint", redact.URL(c.Endpoint)).
		Str("auth", "default AWS chain").Str("format", c.Format).Int("max_retries", *c.MaxRetries).Msg("sqs sink configured")
	return s, nil
}

// buildSink builds the sink around client; c is validated.
func buildSink(name string, c sqsConfig, client API, log zerolog.Logger) *Sink {
	s := &Sink{
		name:     name,
		log:      log,
		env:      c.Settings,
		maxBytes: c.MaxMessageBytes,
		client:   client,
		urls:     map[string]string{},
	}
	if isURL(c.Queue) {
		s.queueURL = c.Queue
	} else {
		s.queue, _ = parseQueue(c.Queue) // validated
	}
	s.batcher = awsbatch.Batcher{Sink: "sqs", Service: "SQS", Noun: "queue", Codes: codeVerdicts, MaxBytes: c.MaxMessageBytes,
		Timeout: c.Timeout.D(), NotFound: hintNotFound}
	if s.queue != nil && !s.queue.Fixed() {
		s.batcher.Setting, s.batcher.Template = "queue", s.queue.Text()
	}
	return s
}

// Name returns the sink's configured name.
func (s *Sink) Name() string { return s.name }

// Publish sends msgs, in order, and returns nil only when SQS has
// acknowledged every one of them.
//
// A message whose queue (from the template) is not a legal name, or that
// is larger than max_message_bytes in its SQS form, fails the whole call
// before anything is sent, with a publish.Rejected error naming it
// (relay.on_refused applies). The messages of each queue go out with
// SendMessageBatch, up to 10 entries and max_message_bytes a request, one
// request at a time; the queues one after another (awsbatch.Batcher); a
// request to a FIFO queue holds at most one entry per message group.
// SQS answers for each entry: those it stored are reported with
// publish.Partial, and after a failed entry the queue's later batches
// are not sent. An entry SQS refuses for what it holds (its size,
// characters, attributes) is Rejected, naming the message; a queue that
// does not exist is Permanent, or Rejected when a template chose it
// (docs/security.md); throttling, server errors and network errors are
// transient. When ctx ends, or the call takes longer than timeout,
// Publish returns promptly with an error wrapping ctx.Err()
// (context.DeadlineExceeded for the timeout).
func (s *Sink) Publish(ctx context.Context, msgs []*message.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqs: publishing %s: %w", publish.DescribeCall(msgs), err)
	}
	dests, err := s.group(msgs)
	if err != nil {
		return err
	}
	return s.batcher.Send(ctx, awsbatch.SendFunc(s.sendBatch), dests, len(msgs))
}

// group splits msgs by queue, keeping their order, maps each to its SQS
// form, and returns a Rejected error for the first message with an
// illegal queue name or too large to send.
func (s *Sink) group(msgs []*message.Message) ([]*awsbatch.Dest, error) {
	var dests awsbatch.Dests
	now := time.Now()
	for i, m := range msgs {
		q := s.queueURL
		if s.queue != nil {
			var err error
			if q, err = s.queue.Expand(m); err != nil {
				return nil, publish.Rejected(fmt.Errorf("sqs: %w", publish.NameError(m, "queue", q, s.queue.Text(), err)))
			}
		}
		body, attrs, size := awsbatch.Encode(m, &s.env, s.dropped)
		delay, err := delaySeconds(m, isFIFO(q), now)
		if err != nil {
			return nil, publish.Rejected(fmt.Errorf("sqs: %s to queue %q: %w", publish.Describe(m), showQueue(q), err))
		}
		if size > s.maxBytes {
			return nil, publish.Rejected(fmt.Errorf("sqs: %s to queue %q: %d bytes as SQS counts them (body %d, attributes %d), over max_message_bytes %d; %s",
				publish.Describe(m), showQueue(q), size, len(body), size-len(body), s.maxBytes, hintTooLarge))
		}
		dests.Add(q, showQueue(q), isFIFO(q), i, m, awsbatch.Entry{Body: body, Attrs: attrs, Size: size, Delay: delay})
	}
	return dests.List, nil
}

// dropped logs, once per name and reason for the sink's life, that a
// headers column entry was left out.
func (s *Sink) dropped(name, why string) {
	if _, seen := s.warned.LoadOrStore(name+"\x00"+why, true); !seen {
		s.log.Warn().Str("header", name).Str("reason", why).
			Msg("an entry of the outbox headers column was not sent as an SQS message attribute; further entries of this name are left out without a warning (docs/sinks/sqs.md, \"Attributes\")")
	}
}

// url returns the URL of d's queue: as configured, or from GetQueueUrl,
// cached.
func (s *Sink) url(ctx context.Context, d *awsbatch.Dest) (string, error) {
	if s.queue == nil {
		return d.Addr, nil
	}
	if u, ok := s.urls[d.Addr]; ok {
		return u, nil
	}
	out, err := s.client.GetQueueUrl(ctx, &sqsapi.GetQueueUrlInput{QueueName: aws.String(d.Addr)})
	if err != nil {
		return "", err
	}
	if len(s.urls) >= maxCachedURLs {
		clear(s.urls)
	}
	u := aws.ToString(out.QueueUrl)
	s.urls[d.Addr] = u
	return u, nil
}

// sendBatch sends entries to d's queue in one SendMessageBatch request
// (awsbatch.Sender).
func (s *Sink) sendBatch(ctx context.Context, d *awsbatch.Dest, entries []*awsbatch.Entry) (awsbatch.Answer, error) {
	u, err := s.url(ctx, d)
	if err != nil {
		return awsbatch.Answer{}, err
	}
	in := &sqsapi.SendMessageBatchInput{QueueUrl: aws.String(u), Entries: make([]types.SendMessageBatchRequestEntry, 0, len(entries))}
	for j, e := range entries {
		re := types.SendMessageBatchRequestEntry{
			Id:                aws.String(awsbatch.ID(j)),
			MessageBody:       aws.String(e.Body),
			MessageAttributes: make(map[string]types.MessageAttributeValue, len(e.Attrs)),
		}
		for k, v := range e.Attrs {
			re.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String(awsbatch.StringType), StringValue: aws.String(v)}
		}
		if e.Delay > 0 {
			re.DelaySeconds = e.Delay
		}
		if d.FIFO {
			re.MessageGroupId, re.MessageDeduplicationId = aws.String(e.Group), aws.String(e.Dedup)
		}
		in.Entries = append(in.Entries, re)
	}
	out, err := s.client.SendMessageBatch(ctx, in)
	if err != nil {
		return awsbatch.Answer{}, err
	}
	ans := awsbatch.Answer{Stored: make(map[string]bool, len(out.Successful)), Failed: make(map[string]awsbatch.Failure, len(out.Failed))}
	for _, r := range out.Successful {
		ans.Stored[aws.ToString(r.Id)] = true
	}
	for _, f := range out.Failed {
		ans.Failed[aws.ToString(f.Id)] = awsbatch.Failure{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
	}
	return ans, nil
}

// Close releases the sink. The SDK's client holds idle HTTP connections
// only; it is safe to call more than once.
func (s *Sink) Close() error { return nil }

// showQueue returns a queue name, or a queue URL without what could be a
// credential, for errors and logs.
func showQueue(q string) string {
	if isURL(q) {
		return redact.URL(q)
	}
	return q
}

// MaxMessageBytes returns max_message_bytes (publish.Limited: a claim
// check's default threshold).
func (s *Sink) MaxMessageBytes() int { return s.maxBytes }
