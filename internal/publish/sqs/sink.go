package sqs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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

// maxBatchEntries is how many entries SQS takes in one SendMessageBatch.
const maxBatchEntries = 10

// maxCachedURLs bounds the queue URLs the sink remembers (one per queue
// a template reached); the cache starts over beyond it.
const maxCachedURLs = 4096

// errTimeout is the cause of a Publish call's own deadline.
var errTimeout = errors.New("sqs: timeout")

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
	timeout  time.Duration
	client   API

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
		timeout:  c.Timeout.D(),
		client:   client,
		urls:     map[string]string{},
	}
	if isURL(c.Queue) {
		s.queueURL = c.Queue
	} else {
		s.queue, _ = parseQueue(c.Queue) // validated
	}
	return s
}

// Name returns the sink's configured name.
func (s *Sink) Name() string { return s.name }

// group is the messages of one Publish call that go to one queue, in
// order, with their SQS form.
type group struct {
	queue   string // the name, or the URL as configured
	fifo    bool
	msgs    []*message.Message
	entries []entry
	idx     []int // idx[i]: the index of msgs[i] in the call
}

// Publish sends msgs, in order, and returns nil only when SQS has
// acknowledged every one of them.
//
// A message whose queue (from the template) is not a legal name, or that
// is larger than max_message_bytes in its SQS form, fails the whole call
// before anything is sent, with a publish.Rejected error naming it
// (relay.on_refused applies). The messages of each queue go out with
// SendMessageBatch, up to 10 entries and max_message_bytes a request, one
// request at a time; the queues one after another. SQS answers for each
// entry: those it stored are reported with publish.Partial — of a FIFO
// queue only, per message group, those before the group's first failed
// entry (the others are sent again, and SQS's deduplication drops the
// copies stored) — and the queue's later batches are not sent. An entry
// SQS refuses for what it holds (its size, characters, attributes) is
// Rejected, naming the message; a queue that does not exist is Permanent,
// or Rejected when a template chose it (docs/security.md); throttling,
// server errors and network errors are transient. When ctx ends, or the
// call takes longer than timeout, Publish returns promptly with an error
// wrapping ctx.Err() (context.DeadlineExceeded for the timeout).
func (s *Sink) Publish(ctx context.Context, msgs []*message.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqs: publishing %s: %w", publish.DescribeCall(msgs), err)
	}
	groups, err := s.group(msgs)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout, errTimeout)
	defer cancel()

	done := make([]bool, len(msgs))
	var first error
	for _, g := range groups {
		err := s.send(ctx, g, done, len(msgs))
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

// group splits msgs by queue, keeping their order, maps each to its SQS
// form, and returns a Rejected error for the first message with an
// illegal queue name or too large to send.
func (s *Sink) group(msgs []*message.Message) ([]*group, error) {
	var groups []*group
	byQueue := map[string]*group{}
	now := time.Now()
	for i, m := range msgs {
		q := s.queueURL
		if s.queue != nil {
			var err error
			if q, err = s.queue.Expand(m); err != nil {
				return nil, publish.Rejected(fmt.Errorf("sqs: %w", publish.NameError(m, "queue", q, s.queue.Text(), err)))
			}
		}
		e := toEntry(m, &s.env, s.dropped)
		delay, err := delaySeconds(m, isFIFO(q), now)
		if err != nil {
			return nil, publish.Rejected(fmt.Errorf("sqs: %s to queue %q: %w", publish.Describe(m), showQueue(q), err))
		}
		e.delay = delay
		if e.size > s.maxBytes {
			return nil, publish.Rejected(fmt.Errorf("sqs: %s to queue %q: %d bytes as SQS counts them (body %d, attributes %d), over max_message_bytes %d; %s",
				publish.Describe(m), showQueue(q), e.size, len(e.body), e.size-len(e.body), s.maxBytes, hintTooLarge))
		}
		g := byQueue[q]
		if g == nil {
			g = &group{queue: q, fifo: isFIFO(q)}
			byQueue[q] = g
			groups = append(groups, g)
		}
		g.msgs = append(g.msgs, m)
		g.entries = append(g.entries, e)
		g.idx = append(g.idx, i)
	}
	return groups, nil
}

// dropped logs, once per name and reason for the sink's life, that a
// headers column entry was left out.
func (s *Sink) dropped(name, why string) {
	if _, seen := s.warned.LoadOrStore(name+"\x00"+why, true); !seen {
		s.log.Warn().Str("header", name).Str("reason", why).
			Msg("an entry of the outbox headers column was not sent as an SQS message attribute; further entries of this name are left out without a warning (docs/sinks/sqs.md, \"Attributes\")")
	}
}

// url returns the URL of g's queue: as configured, or from GetQueueUrl,
// cached.
func (s *Sink) url(ctx context.Context, g *group) (string, error) {
	if s.queue == nil {
		return g.queue, nil
	}
	if u, ok := s.urls[g.queue]; ok {
		return u, nil
	}
	out, err := s.client.GetQueueUrl(ctx, &sqsapi.GetQueueUrlInput{QueueName: aws.String(g.queue)})
	if err != nil {
		return "", err
	}
	if len(s.urls) >= maxCachedURLs {
		clear(s.urls)
	}
	u := aws.ToString(out.QueueUrl)
	s.urls[g.queue] = u
	return u, nil
}

// send sends g's messages in batches, one batch at a time, and marks in
// done those SQS stored (see Publish). total is the size of the call, for
// error messages.
func (s *Sink) send(ctx context.Context, g *group, done []bool, total int) error {
	u, err := s.url(ctx, g)
	if err != nil {
		return s.failed(ctx, err, g, 0, len(g.msgs), total)
	}
	for start := 0; start < len(g.msgs); {
		end, size := start, 0
		for end < len(g.msgs) && end-start < maxBatchEntries && size+g.entries[end].size <= s.maxBytes {
			size += g.entries[end].size
			end++
		}
		in := &sqsapi.SendMessageBatchInput{QueueUrl: aws.String(u), Entries: make([]types.SendMessageBatchRequestEntry, 0, end-start)}
		for i := start; i < end; i++ {
			e := g.entries[i]
			re := types.SendMessageBatchRequestEntry{
				Id:                aws.String(strconv.Itoa(i - start)),
				MessageBody:       aws.String(e.body),
				MessageAttributes: e.attrs,
			}
			if e.delay > 0 {
				re.DelaySeconds = e.delay
			}
			if g.fifo {
				re.MessageGroupId = aws.String(GroupID(g.msgs[i].OrderingKey()))
				re.MessageDeduplicationId = aws.String(g.msgs[i].ID)
			}
			in.Entries = append(in.Entries, re)
		}
		out, err := s.client.SendMessageBatch(ctx, in)
		if err != nil {
			return s.failed(ctx, err, g, start, end, total)
		}
		if err := s.settle(g, start, end, out, done); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// settle marks in done the entries of g.msgs[start:end] that out reports
// stored (of a FIFO queue, per group, only those before a failed entry of
// the group), and returns the error of the first failed entry.
func (s *Sink) settle(g *group, start, end int, out *sqsapi.SendMessageBatchOutput, done []bool) error {
	ok := make(map[string]bool, len(out.Successful))
	for _, r := range out.Successful {
		ok[aws.ToString(r.Id)] = true
	}
	i := SettleBatch(g.msgs, g.idx, g.fifo, start, end, ok, done)
	if i < 0 {
		return nil
	}
	code, text := "NoResult", "SQS reported the entry neither stored nor failed"
	var senderFault bool
	for _, f := range out.Failed {
		if aws.ToString(f.Id) == strconv.Itoa(i-start) {
			code, text, senderFault = aws.ToString(f.Code), aws.ToString(f.Message), f.SenderFault
		}
	}
	v := classifyCode(code, senderFault)
	err := fmt.Errorf("sqs: %s to queue %q: refused by SQS (%s: %s)", publish.Describe(g.msgs[i]), showQueue(g.queue), code, text)
	if v.Hint != "" {
		err = fmt.Errorf("%w; %s", err, v.Hint)
	}
	return v.Mark(err)
}

// SettleBatch marks in done (at idx[i]) the entries of msgs[start:end]
// whose entry id in their batch request (strconv.Itoa(i-start)) is in
// ok, the answer's stored entries; of a FIFO destination, per group
// (OrderingKey) only those before the group's first entry not stored
// (the rest are sent again, in order). It returns the index in msgs of
// the first entry not stored, -1 when all were. The sns sink settles
// PublishBatch's answers with it too.
func SettleBatch(msgs []*message.Message, idx []int, fifo bool, start, end int, ok map[string]bool, done []bool) int {
	first := -1
	var broken map[string]bool
	for i := start; i < end; i++ {
		m := msgs[i]
		stored := ok[strconv.Itoa(i-start)]
		if stored && (!fifo || !broken[m.OrderingKey()]) {
			done[idx[i]] = true
			continue
		}
		if fifo {
			if broken == nil {
				broken = map[string]bool{}
			}
			broken[m.OrderingKey()] = true
		}
		if !stored && first < 0 {
			first = i
		}
	}
	return first
}

// failed turns an error of a request for g.msgs[start:end] into the error
// Publish returns: it names the batch's first message, the queue, and how
// much of the call was not acknowledged, and marks it per classify (a
// queue a template chose that does not exist is Rejected).
func (s *Sink) failed(ctx context.Context, err error, g *group, start, end, total int) error {
	m := g.msgs[start]
	what := publish.Describe(m)
	if n := end - start; n > 1 {
		last := g.msgs[end-1]
		what = fmt.Sprintf("batch of %d messages from %s (lsn %s) to %s (lsn %s)", n, m.ID, m.LSN, last.ID, last.LSN)
	}
	msg := fmt.Sprintf("sqs: %s to queue %q", what, showQueue(g.queue))
	if total > 1 {
		msg += fmt.Sprintf(" (%d of the call's %d messages not acknowledged by the queue)", len(g.msgs)-start, total)
	}
	if ctx.Err() != nil {
		cause := ctx.Err()
		if errors.Is(context.Cause(ctx), errTimeout) {
			return fmt.Errorf("%s: timeout %s passed: %w (%v)", msg, s.timeout, cause, err)
		}
		if errors.Is(err, cause) {
			return fmt.Errorf("%s: %w", msg, err)
		}
		return fmt.Errorf("%s: %w (%v)", msg, cause, err)
	}
	v := classify(err)
	if v.Hint != "" {
		err = fmt.Errorf("%s: %w; %s", msg, err, v.Hint)
	} else {
		err = fmt.Errorf("%s: %w", msg, err)
	}
	if v.Permanent && v.Hint == hintNotFound && s.queue != nil && !s.queue.Fixed() {
		// A queue the message's type or key chose: other messages go to
		// other queues, and a name a message chose must never stop the
		// relay for good (docs/security.md).
		return publish.Rejected(fmt.Errorf("%w (the queue comes from queue %q: or park the message with relay.on_refused: dead_letter)", err, s.queue.Text()))
	}
	return v.Mark(err)
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
