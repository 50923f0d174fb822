package servicebus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/redact"
)

func init() {
	publish.Register("servicebus", publish.FactoryOf(New))
	publish.RegisterScheduling("servicebus", "ScheduledEnqueueTime")
}

// Schedules reports that the sink holds messages back until their
// deliver_at: it sends them with ScheduledEnqueueTime
// (publish.Scheduler).
func (s *Sink) Schedules() bool { return true }

// Names the sink gives to message properties.
const (
	// PropertyDiagnosticID is the application property that carries the
	// traceparent for the Service Bus SDKs that read it (the .NET SDK's
	// Diagnostic-Id).
	PropertyDiagnosticID = "Diagnostic-Id"
	// HeaderTraceparent is the headers column entry copied to
	// PropertyDiagnosticID.
	HeaderTraceparent = "traceparent"

	ContentTypeJSON   = "application/json"
	ContentTypeBinary = "application/octet-stream"

	// PrefixCloudEvents is the prefix of the application properties that
	// carry the CloudEvents context attributes with format: cloudevents
	// (the CloudEvents AMQP protocol binding, binary content mode;
	// docs/design.md, "Formats"): cloudEvents:id, cloudEvents:source, ...
	PrefixCloudEvents = "cloudEvents:"
	// PropertyPartitionKey carries the outbox key with format: cloudevents
	// (CloudEvents Partitioning extension); absent when the key is NULL.
	PropertyPartitionKey = PrefixCloudEvents + "partitionkey"
)

// CorrelationHeaders are the headers column entries whose value becomes
// the CorrelationId, the first one present winning.
var CorrelationHeaders = []string{"correlation_id", "correlation-id"}

// parallelEntities bounds how many entities one Publish call sends to at
// once (with an entity template); one entity's batches go one at a time.
const parallelEntities = 8

// maxSenders bounds the cached senders (one per entity, each holding AMQP
// links); the least recently used one is closed beyond it.
const maxSenders = 64

// errTimeout is the cause of a Publish call's own deadline.
var errTimeout = errors.New("servicebus: timeout")

// Sink publishes outbox messages to Azure Service Bus (see the package
// doc).
//
// Publish calls are serialized by the sink (a second caller waits for the
// first), which the ordering argument needs; Name and Close are safe to
// call from any goroutine. Publish is not called after Close.
type Sink struct {
	name          string
	log           zerolog.Logger
	entity        *entityTemplate
	env           envelope.Settings // format: raw or cloudevents
	sessions      bool
	maxBatchBytes uint64
	maxMsgBytes   int
	timeout       time.Duration
	newClient     func() (*azservicebus.Client, error)
	// beforeSend, if set, is called before each batch is sent, with its
	// entity, from the goroutine sending to that entity (entities run in
	// parallel): a test's hook to inject a fault at a given batch.
	beforeSend func(entity string)

	mu      sync.Mutex // serializes Publish; guards client, entity's cache, senders and uses
	client  *azservicebus.Client
	senders map[string]*cachedSender
	uses    uint64

	closeOnce sync.Once
	closeErr  error
}

type cachedSender struct {
	*azservicebus.Sender
	lastUse uint64
}

var _ publish.Sink = (*Sink)(nil)

// New opens a servicebus sink from its configuration: it decodes the
// kind's settings strictly, fills in defaults and validates them (errors
// name the field, e.g. "queue: empty"). It does not connect: the first
// Publish does, and a namespace that is unreachable then is a transient
// error, not a failed start.
func New(cfg *config.Sink, log zerolog.Logger) (publish.Sink, error) {
	var c sbConfig
	if err := publish.DecodeSettings(cfg, &c); err != nil {
		return nil, err
	}
	return open(cfg.Name, c, log)
}

// open builds the sink from validated settings.
func open(name string, c sbConfig, log zerolog.Logger) (*Sink, error) {
	field, value := c.entityField()
	entity, err := parseEntity(field, value)
	if err != nil {
		return nil, err
	}
	opts := &azservicebus.ClientOptions{ApplicationID: "walpost", RetryOptions: c.retryOptions()}
	var newClient func() (*azservicebus.Client, error)
	auth := "connection string"
	if c.ConnectionString != "" {
		newClient = func() (*azservicebus.Client, error) {
			client, err := azservicebus.NewClientFromConnectionString(c.ConnectionString, opts)
			if err != nil {
				// The SDK's parse errors may quote the string (and so the key).
				return nil, fmt.Errorf("connection_string: %s", redact.NewSet(redact.ConnectionStringSecrets(c.ConnectionString)...).Redact(err.Error()))
			}
			return client, nil
		}
	} else {
		auth = "Azure AD (DefaultAzureCredential)"
		// One credential for the sink's life: it caches its tokens.
		cred, err := azidentity.NewDefaultAzureCredential(nil)
		if err != nil {
			return nil, fmt.Errorf("namespace: creating the Azure AD credential: %w", err)
		}
		newClient = func() (*azservicebus.Client, error) {
			client, err := azservicebus.NewClient(c.Namespace, cred, opts)
			if err != nil {
				return nil, fmt.Errorf("namespace: %w", err)
			}
			return client, nil
		}
	}
	client, err := newClient()
	if err != nil {
		return nil, err
	}
	s := &Sink{
		name:          name,
		log:           log,
		entity:        entity,
		env:           c.Settings,
		sessions:      c.Sessions,
		maxBatchBytes: uint64(c.MaxBatchBytes),
		maxMsgBytes:   c.MaxMessageBytes,
		timeout:       c.Timeout.D(),
		newClient:     newClient,
		client:        client,
		senders:       map[string]*cachedSender{},
	}
	log.Info().Str(field, value).Str("auth", auth).Str("endpoint", endpoint(c)).Bool("sessions", c.Sessions).
		Str("format", c.Format).Int("max_retries", *c.MaxRetries).Msg("servicebus sink configured")
	return s, nil
}

// endpoint returns the namespace host for logs, never the secret.
func endpoint(c sbConfig) string {
	if c.Namespace != "" {
		return c.Namespace
	}
	for _, part := range strings.Split(c.ConnectionString, ";") {
		if k, v, ok := strings.Cut(part, "="); ok && strings.EqualFold(strings.TrimSpace(k), "endpoint") {
			return v
		}
	}
	return ""
}

// Name returns the sink's configured name.
func (s *Sink) Name() string { return s.name }

// group is the messages of one Publish call that go to one entity, in
// order, with their Service Bus form and the entity's sender.
type group struct {
	entity string
	sender *azservicebus.Sender
	msgs   []*message.Message
	sbMsgs []*azservicebus.Message
	idx    []int // idx[i]: the index of msgs[i] in the call
	// acked is how many of msgs (a prefix) Service Bus acknowledged; set
	// by send.
	acked int
}

// Publish sends msgs, in order, and returns nil only when Service Bus has
// acknowledged every one of them.
//
// A message whose entity (from the template) is not a legal name, or
// whose session id would be over Service Bus's 128 characters, fails the
// whole call before anything is sent, with a publish.Rejected error
// naming it (relay.on_refused applies).
// The messages of each entity go out in batches as large as the entity
// (or max_batch_bytes) allows, one batch at a time: a batch is sent only
// once the one before it was acknowledged. With an entity template the
// entities are served in parallel. On the first failure of an entity its
// later batches are not sent, and Publish returns an error naming the
// batch's first message (id and LSN) and the entity; Permanent (see
// classify) when no retry can help; marked with publish.Partial to report
// every message of every batch Service Bus acknowledged (of each entity,
// the batches before its failed one), so that the retry sends only the
// others. After a transient failure the next call starts from a new
// connection (see needsReset). When ctx ends, or the call takes longer
// than timeout, Publish returns promptly with an error wrapping ctx.Err()
// (context.DeadlineExceeded for the timeout); a batch already sent may
// still be stored, and is not reported.
func (s *Sink) Publish(ctx context.Context, msgs []*message.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("servicebus: publishing %s: %w", publish.DescribeCall(msgs), err)
	}
	groups, err := s.group(msgs)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, s.timeout, errTimeout)
	defer cancel()

	err = s.sendGroups(ctx, groups, len(msgs))
	if err == nil {
		return nil
	}
	if needsReset(err) {
		s.reset()
	}
	done := make([]bool, len(msgs))
	for _, g := range groups {
		for _, i := range g.idx[:g.acked] {
			done[i] = true
		}
	}
	return publish.Partial(err, done)
}

// sendGroups sends each group, the groups in parallel, and returns the
// first error, a Permanent one first.
func (s *Sink) sendGroups(ctx context.Context, groups []*group, total int) error {
	if len(groups) == 1 {
		return s.send(ctx, groups[0], total)
	}
	errs := make([]error, len(groups))
	sem := make(chan struct{}, parallelEntities)
	var wg sync.WaitGroup
	for i, g := range groups {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = s.send(ctx, g, total)
		}()
	}
	wg.Wait()
	// A permanent error wins: it is what the operator must act on.
	var first error
	for _, err := range errs {
		if err != nil && publish.IsPermanent(err) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// needsReset reports whether, after err, the sink should start over with a
// new connection. The SDK recovers a broken connection or link only
// between its own retries of one operation: after the last failed attempt
// (or with max_retries 0) it would hand the broken link to the next call.
// So after any transient failure that is not the service's own answer on
// a working link (throttling, a service timeout, a full entity), the next
// Publish starts from a fresh client.
func needsReset(err error) bool {
	if publish.IsPermanent(err) {
		return false
	}
	var ae *amqp.Error
	var le *amqp.LinkError
	var ce *amqp.ConnError
	var se *amqp.SessionError
	if errors.As(err, &ae) && !errors.As(err, &le) && !errors.As(err, &ce) && !errors.As(err, &se) {
		switch ae.Condition {
		case condServerBusy, condTimeout, amqp.ErrCondResourceLimitExceeded:
			return false
		}
	}
	return true
}

// reset closes the senders and the client, briefly (the connection may be
// dead), and opens a new client; senders are made again on demand.
func (s *Sink) reset() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for name, snd := range s.senders {
		if err := snd.Close(ctx); err != nil {
			s.log.Debug().Err(err).Str("entity", name).Msg("closing a sender after a failure")
		}
	}
	clear(s.senders)
	if err := s.client.Close(ctx); err != nil {
		s.log.Debug().Err(err).Msg("closing the client after a failure")
	}
	client, err := s.newClient()
	if err != nil { // cannot happen: the settings were validated
		s.log.Error().Err(err).Msg("servicebus: reopening the client")
		return
	}
	s.client = client
}

// group splits msgs by entity, keeping their order, maps each to a Service
// Bus message, and returns a Rejected error for the first message with an
// illegal entity name or session id.
func (s *Sink) group(msgs []*message.Message) ([]*group, error) {
	var groups []*group
	byEntity := map[string]*group{}
	s.uses++
	for i, m := range msgs {
		name, err := s.entity.Expand(m)
		if err != nil {
			return nil, publish.Rejected(fmt.Errorf("servicebus: message %s (lsn %s, type %q): entity %q from %s %q: %w",
				m.ID, m.LSN, m.Type, name, s.entity.Field(), s.entity.Text(), err))
		}
		if s.sessions && len(m.OrderingKey()) > maxSessionIDLen {
			return nil, publish.Rejected(fmt.Errorf("servicebus: %s to entity %q: key of %d characters is over Service Bus's %d for a session id (sessions: true)",
				publish.Describe(m), name, len(m.OrderingKey()), maxSessionIDLen))
		}
		g := byEntity[name]
		if g == nil {
			sender, err := s.sender(name)
			if err != nil {
				return nil, fmt.Errorf("servicebus: %s: sender for entity %q: %w", publish.Describe(m), name, err)
			}
			g = &group{entity: name, sender: sender}
			byEntity[name] = g
			groups = append(groups, g)
		}
		g.msgs = append(g.msgs, m)
		g.sbMsgs = append(g.sbMsgs, schedule(toMessage(m, s.sessions, &s.env), m, time.Now()))
		g.idx = append(g.idx, i)
	}
	return groups, nil
}

// toMessage maps an outbox message to a Service Bus message (see the
// package doc). With format: cloudevents (env) the application properties
// also carry the CloudEvents context attributes (cloudEvents:specversion,
// cloudEvents:id, cloudEvents:source, cloudEvents:type, cloudEvents:time)
// and cloudEvents:partitionkey for a key, as strings; ContentType is the
// datacontenttype (the same value as with raw), and a headers column
// entry whose name starts with cloudEvents: (in any case) is left out, so
// that the message's own attributes win.
func toMessage(m *message.Message, sessions bool, env *envelope.Settings) *azservicebus.Message {
	id, subject := m.ID, m.Type
	contentType := envelope.ContentType(m)
	body := m.Payload
	if body == nil {
		body = []byte{}
	}
	sm := &azservicebus.Message{
		MessageID:   &id,
		Subject:     &subject,
		ContentType: &contentType,
		Body:        body,
	}
	ce := env != nil && env.IsCloudEvents()
	if len(m.Headers) > 0 || ce || m.ClaimCheck != nil {
		sm.ApplicationProperties = properties(m, ce, env)
		for _, h := range CorrelationHeaders {
			if v := m.Headers[h]; v != "" {
				sm.CorrelationID = &v
				break
			}
		}
	}
	if sessions {
		key := m.OrderingKey()
		sm.SessionID = &key
	}
	return sm
}

// schedule sets sm's ScheduledEnqueueTime from m's deliver_at when it is
// after now (Service Bus enqueues it then: no receiver sees it before)
// and its TimeToLive from m's expires_at, counted from when it is
// enqueued (Service Bus's ExpiresAt is the enqueued time plus the time
// to live; none over MaxTimeToLive), and returns sm.
func schedule(sm *azservicebus.Message, m *message.Message, now time.Time) *azservicebus.Message {
	if m.Delay(now) > 0 {
		at := m.DeliverAt.UTC()
		sm.ScheduledEnqueueTime = &at
	}
	if ttl := m.TTL(now); ttl > 0 && ttl <= MaxTimeToLive {
		sm.TimeToLive = &ttl
	}
	return sm
}

// MaxTimeToLive is the longest TimeToLive the sink sends: AMQP's ttl
// header is 32-bit milliseconds (about 49.7 days), and the client
// truncates a longer one without an error, so that a far-future
// expires_at (9999-12-31, 300 years) would become a few days or hours
// and the message would expire early. An expires_at further ahead is
// sent without a TimeToLive: the entity's default time to live applies
// (docs/configuration.md, "Scheduled delivery and expiry").
const MaxTimeToLive = (1<<32 - 1) * time.Millisecond

// properties returns m's application properties: the headers column
// (walpost-* entries left out), the traceparent again as Diagnostic-Id,
// with ce the CloudEvents attributes (see toMessage), then the relay's
// own headers (message.RelayHeaders).
func properties(m *message.Message, ce bool, env *envelope.Settings) map[string]any {
	props := make(map[string]any, len(m.Headers)+7)
	for k, v := range m.Headers {
		if !publish.KeepRowHeader(k) {
			continue
		}
		if ce && envelope.HasPrefixFold(k, PrefixCloudEvents) {
			publish.LeaveOutRowHeader(k, publish.OwnRowHeader)
			continue
		}
		props[k] = v
	}
	if tp, ok := m.Headers[HeaderTraceparent]; ok {
		if _, set := m.Headers[PropertyDiagnosticID]; !set {
			props[PropertyDiagnosticID] = tp
		}
	}
	if ce {
		for _, a := range env.Attributes(m) {
			props[PrefixCloudEvents+a.Name] = a.Value
		}
		if m.HasKey {
			props[PropertyPartitionKey] = m.Key
		}
	}
	for _, h := range m.RelayHeaders() {
		props[h.Name] = h.Value
	}
	return props
}

// sender returns the cached sender of entity, creating it (no I/O) and
// closing the least recently used one beyond maxSenders.
func (s *Sink) sender(entity string) (*azservicebus.Sender, error) {
	if c, ok := s.senders[entity]; ok {
		c.lastUse = s.uses
		return c.Sender, nil
	}
	if len(s.senders) >= maxSenders {
		var oldest string
		var use uint64
		for name, c := range s.senders {
			if c.lastUse < s.uses && (oldest == "" || c.lastUse < use) {
				oldest, use = name, c.lastUse
			}
		}
		if oldest != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := s.senders[oldest].Close(ctx); err != nil {
				s.log.Debug().Err(err).Str("entity", oldest).Msg("closing an idle sender")
			}
			cancel()
			delete(s.senders, oldest)
		}
	}
	snd, err := s.client.NewSender(entity, nil)
	if err != nil {
		return nil, err
	}
	s.senders[entity] = &cachedSender{Sender: snd, lastUse: s.uses}
	return snd, nil
}

// send sends g's messages in batches, one batch at a time, and counts in
// g.acked those Service Bus acknowledged. total is the size of the
// Publish call, for error messages.
func (s *Sink) send(ctx context.Context, g *group, total int) error {
	opts := &azservicebus.MessageBatchOptions{MaxBytes: s.maxBatchBytes}
	var batch *azservicebus.MessageBatch
	start := 0 // index in g.msgs of the batch's first message
	newBatch := func(i int) error {
		var err error
		batch, err = g.sender.NewMessageBatch(ctx, opts)
		if err != nil {
			return s.failed(ctx, err, g, i, i+1, total)
		}
		start = i
		return nil
	}
	flush := func(end int) error {
		if s.beforeSend != nil {
			s.beforeSend(g.entity)
		}
		if err := g.sender.SendMessageBatch(ctx, batch, nil); err != nil {
			return s.failed(ctx, err, g, start, end, total)
		}
		g.acked = end
		return nil
	}
	if err := newBatch(0); err != nil {
		return err
	}
	for i, sm := range g.sbMsgs {
		err := batch.AddMessage(sm, nil)
		if errors.Is(err, azservicebus.ErrMessageTooLarge) && batch.NumMessages() > 0 {
			if err := flush(i); err != nil {
				return err
			}
			if err := newBatch(i); err != nil {
				return err
			}
			err = batch.AddMessage(sm, nil)
		}
		if err != nil {
			m := g.msgs[i]
			if errors.Is(err, azservicebus.ErrMessageTooLarge) {
				return publish.Rejected(fmt.Errorf("servicebus: %s to entity %q: %d bytes of payload; with its properties it does not fit in an empty batch (%s): %w; %s",
					publish.Describe(m), g.entity, len(m.Payload), s.limitName(), err, hintTooLarge))
			}
			return publish.Permanent(fmt.Errorf("servicebus: %s to entity %q: adding it to a batch: %w", publish.Describe(m), g.entity, err))
		}
	}
	return flush(len(g.msgs))
}

// limitName says what bounds a batch, for error messages.
func (s *Sink) limitName() string {
	if s.maxBatchBytes > 0 {
		return fmt.Sprintf("max_batch_bytes %d", s.maxBatchBytes)
	}
	return "the limit the entity advertises"
}

// failed turns an error of sending g.msgs[start:end] (or of preparing the
// batch that starts at start) into the error Publish returns: it names the
// batch's first message, the entity, and how much of the call was not
// acknowledged, and marks it Permanent when classify says so (Rejected
// for a message too large, and for an entity from the template that does
// not exist).
func (s *Sink) failed(ctx context.Context, err error, g *group, start, end, total int) error {
	m := g.msgs[start]
	what := publish.Describe(m)
	if n := end - start; n > 1 {
		last := g.msgs[end-1]
		what = fmt.Sprintf("batch of %d messages from %s (lsn %s) to %s (lsn %s)", n, m.ID, m.LSN, last.ID, last.LSN)
	}
	msg := fmt.Sprintf("servicebus: %s to entity %q", what, g.entity)
	if total > 1 {
		msg += fmt.Sprintf(" (%d of the call's %d messages not acknowledged by the entity)", len(g.msgs)-start, total)
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
	if v.permanent && v.hint == hintBatchTooBig && end-start == 1 {
		v.hint = hintTooLarge
	}
	if v.hint != "" {
		err = fmt.Errorf("%s: %w; %s", msg, err, v.hint)
	} else {
		err = fmt.Errorf("%s: %w", msg, err)
	}
	if v.permanent {
		if v.hint == hintNotFound && !s.entity.Fixed() {
			// An entity the message's type or key chose: other messages
			// go to other entities, and a name a message chose must never
			// stop the relay for good (docs/security.md). Only not-found:
			// an unauthorized answer may be the credential, which every
			// entity would refuse alike.
			return publish.Rejected(fmt.Errorf("%w (the entity comes from %s %q: or park the message with relay.on_refused: dead_letter)",
				err, s.entity.Field(), s.entity.Text()))
		}
		if v.hint == hintTooLarge {
			// The entity refuses this one message for its size (a batch
			// refused as too large is max_batch_bytes's fault: Permanent).
			return publish.Rejected(err)
		}
		return publish.Permanent(err)
	}
	return err
}

// Close closes the senders and the connection. It is safe to call more
// than once; later calls return the first result.
func (s *Sink) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var errs []error
		for name, snd := range s.senders {
			if err := snd.Close(ctx); err != nil {
				errs = append(errs, fmt.Errorf("sender for entity %q: %w", name, err))
			}
		}
		clear(s.senders)
		if err := s.client.Close(ctx); err != nil {
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("servicebus: closing sink %s: %w", s.name, err)
		}
	})
	return s.closeErr
}

// MaxMessageBytes returns max_message_bytes (publish.Limited: a claim
// check's default threshold).
func (s *Sink) MaxMessageBytes() int { return s.maxMsgBytes }
