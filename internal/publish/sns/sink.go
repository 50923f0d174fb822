package sns

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	snsapi "github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/publish/nametmpl"
	"github.com/walpost/walpost/internal/publish/sqs"
	"github.com/walpost/walpost/internal/redact"
)

func init() {
	publish.Register("sns", publish.FactoryOf(New))
}

// maxBatchEntries is how many entries SNS takes in one PublishBatch.
const maxBatchEntries = 10

var errTimeout = errors.New("sns: timeout")

// API is the part of the SNS client the sink uses; *sns.Client satisfies
// it.
type API interface {
	PublishBatch(ctx context.Context, in *snsapi.PublishBatchInput, optFns ...func(*snsapi.Options)) (*snsapi.PublishBatchOutput, error)
}

// Sink publishes outbox messages to Amazon SNS (see the package doc).
//
// Publish calls are serialized by the sink; Name and Close are safe to
// call from any goroutine.
type Sink struct {
	name     string
	log      zerolog.Logger
	prefix   string // the ARN up to the topic name
	topic    *nametmpl.Template
	env      envelope.Settings
	maxBytes int
	timeout  time.Duration
	client   API

	mu     sync.Mutex // serializes Publish
	warned sync.Map
}

var _ publish.Sink = (*Sink)(nil)

// New opens an sns sink from its configuration (no request is made).
func New(cfg *config.Sink, log zerolog.Logger) (publish.Sink, error) {
	var c snsConfig
	if err := publish.DecodeSettings(cfg, &c); err != nil {
		return nil, err
	}
	prefix, name, arnRegion, _ := splitARN(c.TopicARN) // validated
	topic, _ := parseTopic(name)
	region := c.Region
	if region == "" {
		region = arnRegion
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(context.Background(), awsconfig.WithRegion(region),
		awsconfig.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = *c.MaxRetries + 1
				// SNS answers throttling with codes the SDK's default list
				// lacks.
				o.Retryables = append(o.Retryables, retry.RetryableErrorCode{Codes: map[string]struct{}{"Throttled": {}, "KMSThrottling": {}}})
			})
		}))
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration (environment, shared config files): %w", err)
	}
	client := snsapi.NewFromConfig(awsCfg, func(o *snsapi.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
	})
	log.Info().Str("topic_arn", c.TopicARN).Str("region", region).Str("endpoint", redact.URL(c.Endpoint)).
		Str("auth", "default AWS chain").Str("format", c.Format).Msg("sns sink configured")
	return &Sink{name: cfg.Name, log: log, prefix: prefix, topic: topic, env: c.Settings, maxBytes: c.MaxMessageBytes,
		timeout: c.Timeout.D(), client: client}, nil
}

// Name returns the sink's configured name.
func (s *Sink) Name() string { return s.name }

type entry struct {
	body  string
	attrs map[string]types.MessageAttributeValue
	size  int
}

type group struct {
	arn     string
	fifo    bool
	msgs    []*message.Message
	entries []entry
	idx     []int
}

// Publish sends msgs with PublishBatch, up to 10 messages and
// max_message_bytes a request, one request at a time per topic, the
// topics one after another, and reports what SNS stored as the sqs sink
// does (per FIFO group up to the group's first failed entry; see the sqs
// package doc): the same mapping, MessageGroupId and
// MessageDeduplicationId. A message too large, or with an illegal topic
// name from the template, fails the call before anything is sent
// (Rejected); a topic a template chose that does not exist is Rejected, a
// fixed one Permanent.
func (s *Sink) Publish(ctx context.Context, msgs []*message.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sns: publishing %s: %w", publish.DescribeCall(msgs), err)
	}
	var groups []*group
	byARN := map[string]*group{}
	for i, m := range msgs {
		name, err := s.topic.Expand(m)
		if err != nil {
			return publish.Rejected(fmt.Errorf("sns: %w", publish.NameError(m, "topic", name, s.topic.Text(), err)))
		}
		body, attrs, size := sqs.Encode(m, &s.env, s.dropped)
		if size > s.maxBytes {
			return publish.Rejected(fmt.Errorf("sns: %s to topic %q: %d bytes as SNS counts them, over max_message_bytes %d; %s",
				publish.Describe(m), name, size, s.maxBytes, hintTooLarge))
		}
		e := entry{body: body, size: size, attrs: make(map[string]types.MessageAttributeValue, len(attrs))}
		for k, v := range attrs {
			e.attrs[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
		arn := s.prefix + name
		g := byARN[arn]
		if g == nil {
			g = &group{arn: arn, fifo: strings.HasSuffix(name, ".fifo")}
			byARN[arn] = g
			groups = append(groups, g)
		}
		g.msgs, g.entries, g.idx = append(g.msgs, m), append(g.entries, e), append(g.idx, i)
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
		if first == nil || publish.IsPermanent(err) && !publish.IsPermanent(first) {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return publish.Partial(first, done)
}

func (s *Sink) send(ctx context.Context, g *group, done []bool, total int) error {
	for start := 0; start < len(g.msgs); {
		end, size := start, 0
		for end < len(g.msgs) && end-start < maxBatchEntries && size+g.entries[end].size <= s.maxBytes {
			size += g.entries[end].size
			end++
		}
		in := &snsapi.PublishBatchInput{TopicArn: aws.String(g.arn)}
		for i := start; i < end; i++ {
			e := g.entries[i]
			re := types.PublishBatchRequestEntry{Id: aws.String(strconv.Itoa(i - start)), Message: aws.String(e.body), MessageAttributes: e.attrs}
			if g.fifo {
				re.MessageGroupId = aws.String(sqs.GroupID(g.msgs[i].OrderingKey()))
				re.MessageDeduplicationId = aws.String(g.msgs[i].ID)
			}
			in.PublishBatchRequestEntries = append(in.PublishBatchRequestEntries, re)
		}
		out, err := s.client.PublishBatch(ctx, in)
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

// settle marks in done the entries SNS stored (of a FIFO topic, per group,
// only those before a failed entry of the group) and returns the error of
// the first failed entry.
func (s *Sink) settle(g *group, start, end int, out *snsapi.PublishBatchOutput, done []bool) error {
	ok := map[string]bool{}
	for _, r := range out.Successful {
		ok[aws.ToString(r.Id)] = true
	}
	i := sqs.SettleBatch(g.msgs, g.idx, g.fifo, start, end, ok, done)
	if i < 0 {
		return nil
	}
	code, text := "NoResult", "SNS reported the entry neither published nor failed"
	var senderFault bool
	for _, f := range out.Failed {
		if aws.ToString(f.Id) == strconv.Itoa(i-start) {
			code, text, senderFault = aws.ToString(f.Code), aws.ToString(f.Message), f.SenderFault
		}
	}
	v := classifyCode(code, senderFault)
	err := fmt.Errorf("sns: %s to topic %q: refused by SNS (%s: %s)", publish.Describe(g.msgs[i]), g.arn, code, text)
	if v.Hint != "" {
		err = fmt.Errorf("%w; %s", err, v.Hint)
	}
	return v.Mark(err)
}

func (s *Sink) failed(ctx context.Context, err error, g *group, start, end, total int) error {
	m := g.msgs[start]
	msg := fmt.Sprintf("sns: %s to topic %q", publish.Describe(m), g.arn)
	if n := end - start; n > 1 {
		msg = fmt.Sprintf("sns: batch of %d messages from %s (lsn %s) to topic %q", n, m.ID, m.LSN, g.arn)
	}
	if total > 1 {
		msg += fmt.Sprintf(" (%d of the call's %d messages not acknowledged by the topic)", len(g.msgs)-start, total)
	}
	if ctx.Err() != nil {
		cause := ctx.Err()
		if errors.Is(context.Cause(ctx), errTimeout) {
			return fmt.Errorf("%s: timeout %s passed: %w (%v)", msg, s.timeout, cause, err)
		}
		return fmt.Errorf("%s: %w (%v)", msg, cause, err)
	}
	v := classify(err)
	if v.Hint != "" {
		err = fmt.Errorf("%s: %w; %s", msg, err, v.Hint)
	} else {
		err = fmt.Errorf("%s: %w", msg, err)
	}
	if v.Permanent && v.Hint == hintNotFound && !s.topic.Fixed() {
		return publish.Rejected(fmt.Errorf("%w (the topic comes from topic_arn %q: or park the message with relay.on_refused: dead_letter)", err, s.prefix+s.topic.Text()))
	}
	return v.Mark(err)
}

func (s *Sink) dropped(name, why string) {
	if _, seen := s.warned.LoadOrStore(name+"\x00"+why, true); !seen {
		s.log.Warn().Str("header", name).Str("reason", why).
			Msg("an entry of the outbox headers column was not sent as an SNS message attribute; further entries of this name are left out without a warning (docs/sinks/sns.md)")
	}
}

// Close releases the sink; the SDK's client holds idle connections only.
func (s *Sink) Close() error { return nil }

// MaxMessageBytes returns max_message_bytes (publish.Limited: a claim
// check's default threshold).
func (s *Sink) MaxMessageBytes() int { return s.maxBytes }
