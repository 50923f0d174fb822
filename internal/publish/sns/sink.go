package sns

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	snsapi "github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"
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
	publish.Register("sns", publish.FactoryOf(New))
}

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
	client   API
	batcher  awsbatch.Batcher

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
	s := &Sink{name: cfg.Name, log: log, prefix: prefix, topic: topic, env: c.Settings, maxBytes: c.MaxMessageBytes, client: client,
		batcher: awsbatch.Batcher{Sink: "sns", Service: "SNS", Noun: "topic", Codes: codeVerdicts, MaxBytes: c.MaxMessageBytes,
			Timeout: c.Timeout.D(), NotFound: hintNotFound}}
	if !topic.Fixed() {
		s.batcher.Setting, s.batcher.Template = "topic_arn", prefix+topic.Text()
	}
	return s, nil
}

// Name returns the sink's configured name.
func (s *Sink) Name() string { return s.name }

// Publish sends msgs with PublishBatch, up to 10 messages and
// max_message_bytes a request (on a FIFO topic one message per group),
// one request at a time per topic, the topics one after another, and
// reports what SNS stored as the sqs sink does, with the same batch loop
// (awsbatch.Batcher): the same mapping, MessageGroupId and
// MessageDeduplicationId. A message too large, or with an illegal topic
// name from the template, fails the call before anything is sent
// (Rejected); a topic a template chose that does not exist is Rejected,
// a fixed one Permanent.
func (s *Sink) Publish(ctx context.Context, msgs []*message.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sns: publishing %s: %w", publish.DescribeCall(msgs), err)
	}
	var dests awsbatch.Dests
	for i, m := range msgs {
		name, err := s.topic.Expand(m)
		if err != nil {
			return publish.Rejected(fmt.Errorf("sns: %w", publish.NameError(m, "topic", name, s.topic.Text(), err)))
		}
		body, attrs, size := awsbatch.Encode(m, &s.env, s.dropped)
		if size > s.maxBytes {
			return publish.Rejected(fmt.Errorf("sns: %s to topic %q: %d bytes as SNS counts them, over max_message_bytes %d; %s",
				publish.Describe(m), name, size, s.maxBytes, hintTooLarge))
		}
		arn := s.prefix + name
		dests.Add(arn, arn, strings.HasSuffix(name, ".fifo"), i, m, awsbatch.Entry{Body: body, Attrs: attrs, Size: size})
	}
	return s.batcher.Send(ctx, awsbatch.SendFunc(s.sendBatch), dests.List, len(msgs))
}

// sendBatch publishes entries to d's topic in one PublishBatch request
// (awsbatch.Sender).
func (s *Sink) sendBatch(ctx context.Context, d *awsbatch.Dest, entries []*awsbatch.Entry) (awsbatch.Answer, error) {
	in := &snsapi.PublishBatchInput{TopicArn: aws.String(d.Addr), PublishBatchRequestEntries: make([]types.PublishBatchRequestEntry, 0, len(entries))}
	for j, e := range entries {
		re := types.PublishBatchRequestEntry{Id: aws.String(awsbatch.ID(j)), Message: aws.String(e.Body),
			MessageAttributes: make(map[string]types.MessageAttributeValue, len(e.Attrs))}
		for k, v := range e.Attrs {
			re.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String(awsbatch.StringType), StringValue: aws.String(v)}
		}
		if d.FIFO {
			re.MessageGroupId, re.MessageDeduplicationId = aws.String(e.Group), aws.String(e.Dedup)
		}
		in.PublishBatchRequestEntries = append(in.PublishBatchRequestEntries, re)
	}
	out, err := s.client.PublishBatch(ctx, in)
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
