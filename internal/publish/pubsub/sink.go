package pubsub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	gps "cloud.google.com/go/pubsub/v2"
	"github.com/rs/zerolog"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/publish/nametmpl"
)

func init() {
	publish.Register("pubsub", publish.FactoryOf(New))
}

// maxPublishers bounds the cached publishers (one per topic a template
// reached); the least recently used one is stopped beyond it.
const maxPublishers = 64

// errTimeout is the cause of a Publish call's own deadline.
var errTimeout = errors.New("pubsub: timeout")

// Sink publishes outbox messages to Google Cloud Pub/Sub (see the package
// doc).
//
// Publish calls are serialized by the sink; Name and Close are safe to
// call from any goroutine. Publish is not called after Close.
type Sink struct {
	name    string
	log     zerolog.Logger
	cfg     psConfig
	topic   *nametmpl.Template
	env     envelope.Settings
	timeout time.Duration
	opts    []option.ClientOption

	mu     sync.Mutex // serializes Publish; guards client, pubs, uses
	client *gps.Client
	pubs   map[string]*cachedPublisher
	uses   uint64

	warned    sync.Map // header name + reason → true, once logged
	closeOnce sync.Once
	closeErr  error
}

type cachedPublisher struct {
	*gps.Publisher
	lastUse uint64
}

var _ publish.Sink = (*Sink)(nil)

// New opens a pubsub sink from its configuration: it decodes the kind's
// settings strictly, fills in defaults and validates them. It makes no
// client: the first Publish does (finding the credentials with ADC), and
// Pub/Sub unreachable then is a transient error.
func New(cfg *config.Sink, log zerolog.Logger) (publish.Sink, error) {
	var c psConfig
	if err := publish.DecodeSettings(cfg, &c); err != nil {
		return nil, err
	}
	topic, err := parseTopic(c.Topic)
	if err != nil {
		return nil, err
	}
	s := &Sink{name: cfg.Name, log: log, cfg: c, topic: topic, env: c.Settings, timeout: c.Timeout.D(), pubs: map[string]*cachedPublisher{}}
	auth := "ADC (application default credentials)"
	switch {
	case c.EmulatorHost != "":
		auth = "none (emulator)"
		s.opts = []option.ClientOption{
			option.WithEndpoint(c.EmulatorHost),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
			option.WithoutAuthentication(),
			option.WithTelemetryDisabled(),
		}
	case c.Endpoint != "":
		s.opts = []option.ClientOption{option.WithEndpoint(c.Endpoint)}
	}
	log.Info().Str("project", c.Project).Str("topic", c.Topic).Str("endpoint", c.Endpoint+c.EmulatorHost).Str("auth", auth).
		Str("format", c.Format).Msg("pubsub sink configured")
	return s, nil
}

// Name returns the sink's configured name.
func (s *Sink) Name() string { return s.name }

// publisher returns the cached publisher of topic, creating it (no I/O)
// and stopping the least recently used one beyond maxPublishers.
func (s *Sink) publisher(topic string) *gps.Publisher {
	if p, ok := s.pubs[topic]; ok {
		p.lastUse = s.uses
		return p.Publisher
	}
	if len(s.pubs) >= maxPublishers {
		var oldest string
		var use uint64
		for name, p := range s.pubs {
			if p.lastUse < s.uses && (oldest == "" || p.lastUse < use) {
				oldest, use = name, p.lastUse
			}
		}
		if oldest != "" {
			s.pubs[oldest].Stop()
			delete(s.pubs, oldest)
		}
	}
	p := s.client.Publisher(topic)
	p.EnableMessageOrdering = true
	p.PublishSettings.CountThreshold = s.cfg.BatchCount
	p.PublishSettings.ByteThreshold = s.cfg.BatchBytes
	p.PublishSettings.DelayThreshold = s.cfg.BatchDelay.D()
	p.PublishSettings.Timeout = s.timeout
	p.PublishSettings.FlowControlSettings.LimitExceededBehavior = gps.FlowControlIgnore
	s.pubs[topic] = &cachedPublisher{Publisher: p, lastUse: s.uses}
	return p
}

// Publish publishes msgs, with ordering keys, and returns nil only when
// Pub/Sub acknowledged every one of them.
//
// A message whose topic (from the template) is not a legal name fails the
// whole call before anything is sent, with a publish.Rejected error. The
// messages go to the client's publishers (one per topic) in order; the
// client bundles them (batch_count, batch_bytes, batch_delay) and sends a
// key's bundles one at a time. Publish then waits for every result. The
// messages Pub/Sub acknowledged are reported with publish.Partial — per
// topic and ordering key only those before the key's first failure (the
// client fails the rest of the key itself, ErrPublishingPaused) — and
// the error of the first failure is returned, a Permanent one first
// (classify; a topic a template chose that does not exist is Rejected).
// The publisher of a topic with a failure is retired rather than resumed
// (ResumePublish): it may still hold messages of the call, and resuming
// would let a later one out before the retry of an earlier one; the
// retry gets a new publisher. When ctx ends, or the call takes longer
// than timeout, Publish returns promptly with an error wrapping
// ctx.Err(); messages a retired publisher still holds may be published
// after that, in their order, and the retry sends them again.
func (s *Sink) Publish(ctx context.Context, msgs []*message.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pubsub: publishing %s: %w", publish.DescribeCall(msgs), err)
	}
	topics := make([]string, len(msgs))
	for i, m := range msgs {
		t, err := s.topic.Expand(m)
		if err != nil {
			return publish.Rejected(fmt.Errorf("pubsub: %w", publish.NameError(m, "topic", t, s.topic.Text(), err)))
		}
		topics[i] = t
	}
	if s.client == nil {
		c, err := gps.NewClient(ctx, s.cfg.Project, s.opts...)
		if err != nil {
			return publish.Permanent(fmt.Errorf("pubsub: creating the client for project %q: %w; %s", s.cfg.Project, err, hintAuth))
		}
		s.client = c
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout, errTimeout)
	defer cancel()
	s.uses++

	results := make([]*gps.PublishResult, len(msgs))
	pubs := make([]*gps.Publisher, len(msgs))
	for i, m := range msgs {
		pubs[i] = s.publisher(topics[i])
		results[i] = pubs[i].Publish(ctx, toMessage(m, &s.env, s.dropped))
	}

	type unit struct{ topic, key string }
	failed := map[unit]bool{}
	failedTopic := map[string]bool{}
	done := make([]bool, len(msgs))
	var first error
	for i, r := range results {
		m := msgs[i]
		u := unit{topics[i], OrderingKey(m.OrderingKey())}
		var err error
		if ctx.Err() != nil {
			err = ctx.Err()
		} else {
			_, err = r.Get(ctx)
		}
		if err == nil && !failed[u] {
			done[i] = true
			continue
		}
		if err == nil {
			continue // stored after a failure of its key: sent again
		}
		failed[u], failedTopic[u.topic] = true, true
		if first == nil || !publish.IsPermanent(first) {
			if err := s.failed(ctx, err, m, topics[i]); first == nil || publish.IsPermanent(err) {
				first = err
			}
		}
	}
	if first != nil {
		// The client paused each failed key and may still hold messages
		// of the call (a bundle it keeps retrying, one it has not sent):
		// resuming the key on this publisher could send a later message
		// before the retry of an earlier one. The publisher is retired
		// instead (stopped in the background, sending what it may still
		// send, in order); the retry gets a new one, with no key paused.
		for t := range failedTopic {
			if p, ok := s.pubs[t]; ok {
				delete(s.pubs, t)
				go p.Stop()
			}
		}
	}
	return publish.Partial(first, done)
}

// failed turns the error of m's result into the error Publish returns.
func (s *Sink) failed(ctx context.Context, err error, m *message.Message, topic string) error {
	msg := fmt.Sprintf("pubsub: %s to topic %q", publish.Describe(m), topic)
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
	if v.hint != "" {
		err = fmt.Errorf("%s: %w; %s", msg, err, v.hint)
	} else {
		err = fmt.Errorf("%s: %w", msg, err)
	}
	switch {
	case v.refused:
		return publish.Rejected(err)
	case v.permanent && v.hint == hintNotFound && !s.topic.Fixed():
		// A topic the message's type or key chose (docs/security.md).
		return publish.Rejected(fmt.Errorf("%w (the topic comes from topic %q: or park the message with relay.on_refused: dead_letter)", err, s.topic.Text()))
	case v.permanent:
		return publish.Permanent(err)
	}
	return err
}

// dropped logs, once per name and reason for the sink's life, that a
// headers column entry was left out.
func (s *Sink) dropped(name, why string) {
	if _, seen := s.warned.LoadOrStore(name+"\x00"+why, true); !seen {
		s.log.Warn().Str("header", name).Str("reason", why).
			Msg("an entry of the outbox headers column was not sent as a Pub/Sub attribute; further entries of this name are left out without a warning (docs/sinks/pubsub.md)")
	}
}

// closeWait bounds how long Close waits for the publishers to send what
// they hold (Pub/Sub may be unreachable: the client would keep trying for
// timeout); the client is closed after it, which ends their requests.
const closeWait = 5 * time.Second

// Close stops the publishers (publishing what they hold, for at most
// closeWait) and closes the client. What was not published is not
// acknowledged either: the relay sends it again. It is safe to call more
// than once.
func (s *Sink) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		var wg sync.WaitGroup
		for _, p := range s.pubs {
			wg.Add(1)
			go func() { defer wg.Done(); p.Stop() }()
		}
		stopped := make(chan struct{})
		go func() { wg.Wait(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(closeWait):
			s.log.Warn().Dur("waited_ms", closeWait).Msg("pubsub: closing with messages still unsent (they were not acknowledged: the relay sends them again)")
		}
		clear(s.pubs)
		if s.client != nil {
			if err := s.client.Close(); err != nil {
				s.closeErr = fmt.Errorf("pubsub: closing sink %s: %w", s.name, err)
			}
		}
	})
	return s.closeErr
}
