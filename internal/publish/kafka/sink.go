package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/rawnet"
)

func init() {
	publish.Register("kafka", publish.FactoryOf(New))
}

// Header keys that carry the message's identity with format: raw.
const (
	HeaderID   = "id"
	HeaderType = "type"
)

// Header keys of format: cloudevents (the CloudEvents Kafka protocol
// binding, binary content mode; docs/design.md, "Formats"): every context
// attribute is a header named PrefixCloudEvents + its name (ce_id, ...),
// and datacontenttype is HeaderContentType.
const (
	PrefixCloudEvents = "ce_"
	HeaderContentType = "content-type"
	// HeaderPartitionKey carries the outbox key (CloudEvents Partitioning
	// extension); absent when the key is NULL.
	HeaderPartitionKey = PrefixCloudEvents + "partitionkey"
)

// Sink publishes outbox messages to Kafka (see the package doc).
//
// Publish calls are serialized by the sink (a second caller waits for the
// first), which is what the ordering argument needs; Name and Close are
// safe to call from any goroutine. Publish is not called after Close.
type Sink struct {
	name       string
	log        zerolog.Logger
	topic      *topicTemplate
	env        envelope.Settings // format: raw or cloudevents
	autoCreate bool
	batchBytes int64
	batchSize  int           // records per group: buffered, then sent together
	timeout    time.Duration // bounds one Publish call's wait for acknowledgements

	client *kgo.Client
	conns  *connErrs // the producer's last failed connection
	opts   []kgo.Opt // client's options, for the transactional producer and the progress reader

	exactlyOnce   bool
	progressTopic string
	txn           *txnState // nil until Resume (exactly_once only); guarded by mu

	mu sync.Mutex // serializes Publish and Resume

	closeOnce sync.Once
}

var _ publish.Sink = (*Sink)(nil)

// New opens a kafka sink from its configuration: it decodes the kind's
// settings strictly, fills in defaults, validates them (errors name the
// field, e.g. "brokers: empty") and loads the TLS files. It does not
// connect: the first Publish does, and a broker that is down then is a
// transient error, not a failed start.
func New(cfg *config.Sink, log zerolog.Logger) (publish.Sink, error) {
	var kc kafkaConfig
	if err := publish.DecodeSettings(cfg, &kc); err != nil {
		return nil, err
	}
	return open(cfg.Name, kc, log)
}

// Settings of the producer that are not configuration keys.
const (
	// metadataMinAge is the shortest time between two metadata requests:
	// a moved leader or a new topic is found this soon after an error
	// (kgo's default, 5s, would make a missing topic take ~20s to fail).
	metadataMinAge = 250 * time.Millisecond
	// unknownTopicRetries is how often a topic may be reported unknown
	// before its records fail, without auto_create_topics.
	unknownTopicRetries = 2
)

// open builds the sink from validated settings.
func open(name string, kc kafkaConfig, log zerolog.Logger) (*Sink, error) {
	opts, tc, err := clientOpts(kc)
	if err != nil {
		return nil, err
	}
	topic, err := parseTopic(kc.Topic)
	if err != nil {
		return nil, err
	}
	conns := &connErrs{}
	opts = append(opts, kgo.WithHooks(conns))
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: sink %s: %w", name, err)
	}
	s := &Sink{
		name:       name,
		log:        log,
		topic:      topic,
		env:        kc.Settings,
		autoCreate: kc.AutoCreateTopics,
		batchBytes: kc.BatchBytes,
		batchSize:  kc.BatchSize,
		timeout:    kc.Timeout.D(),
		client:     client,
		conns:      conns,
		opts:       opts,

		exactlyOnce:   kc.ExactlyOnce,
		progressTopic: kc.ProgressTopic,
	}
	switch kc.Acks {
	case "none":
		log.Warn().Msg("kafka sink with acks: none: Publish cannot know that Kafka stored a message, so a broker failure can lose messages the slot has already confirmed")
	case "leader":
		log.Warn().Msg("kafka sink with acks: leader: the idempotent producer needs acks: all, so it is off, and a retry can store a message twice")
	}
	if tc != nil && tc.InsecureSkipVerify {
		log.Warn().Msg("kafka sink with tls.insecure_skip_verify: the brokers' certificates are not verified, " +
			"so a man-in-the-middle can read and alter messages (and credentials); set tls.ca_file instead")
	}
	if kc.SASL != nil && kc.SASL.Mechanism == mechPlain && tc == nil {
		log.Warn().Msg("kafka sink with SASL PLAIN but without TLS: the password crosses the network in clear text")
	}
	if kc.SASL != nil && kc.SASL.Mechanism == mechOAuthBearer && tc == nil {
		log.Warn().Msg("kafka sink with SASL OAUTHBEARER but without TLS: the token crosses the network in clear text")
	}
	if kc.AutoCreateTopics && strings.HasPrefix(kc.Topic, "{") {
		log.Warn().Str("topic", kc.Topic).Msg("kafka sink with auto_create_topics: true and a topic template that starts with a placeholder: " +
			"whoever writes outbox rows can have the brokers create a topic of any name; give the template a prefix (\"outbox.{type}\") " +
			"or leave auto_create_topics off (docs/security.md)")
	}
	log.Info().Strs("brokers", kc.Brokers).Str("topic", kc.Topic).Str("acks", kc.Acks).
		Str("compression", kc.Compression).Str("format", kc.Format).Bool("tls", tc != nil).
		Bool("idempotent", kc.Acks == "all").Bool("exactly_once", kc.ExactlyOnce).Str("sasl", saslName(kc.SASL)).Msg("kafka sink configured")
	rawnet.Setting().Log(log, "raw system calls on the Kafka brokers' sockets (internal/rawnet)")
	return s, nil
}

// saslName is the SASL mechanism for the log, "none" without SASL.
func saslName(s *saslConfig) string {
	if s == nil {
		return "none"
	}
	return s.Mechanism
}

// clientOpts maps validated settings to the producer's options; it also
// returns the TLS configuration (nil without TLS).
func clientOpts(kc kafkaConfig) ([]kgo.Opt, *tls.Config, error) {
	acks, err := requiredAcks(kc.Acks)
	if err != nil {
		return nil, nil, err
	}
	comp, err := compression(kc.Compression)
	if err != nil {
		return nil, nil, err
	}
	tc, err := kc.TLS.Build()
	if err != nil {
		return nil, nil, err
	}
	mech, err := kc.SASL.mechanism()
	if err != nil {
		return nil, nil, err
	}
	timeout := kc.Timeout.D()
	writeMax := int32(100 << 20) // kgo's default
	if int32(kc.BatchBytes) > writeMax-(1<<20) {
		writeMax = int32(kc.BatchBytes) + 1<<20
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(kc.Brokers...),
		kgo.ClientID(kc.ClientID),
		kgo.Dialer(dialer(timeout, tc)),
		kgo.RequiredAcks(acks),
		kgo.ProducerBatchCompression(comp),
		kgo.ProducerBatchMaxBytes(int32(kc.BatchBytes)),
		kgo.BrokerMaxWriteBytes(writeMax),
		// Publish buffers a group of batch_size records, then flushes
		// (see send); linger has nothing to wait for.
		kgo.ManualFlushing(),
		kgo.MaxBufferedRecords(kc.BatchSize),
		// murmur2 of the key, as the Java client's default partitioner.
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		// No kgo.RecordDeliveryTimeout: kgo measures it from the
		// record's timestamp, which is the commit time (a backlog's
		// records would time out at once). Publish bounds each call by
		// timeout instead, through the records' context.
		kgo.ProduceRequestTimeout(timeout),
		kgo.MetadataMinAge(metadataMinAge),
	}
	if v := kc.maxVersions(); v != nil {
		opts = append(opts, kgo.MaxVersions(v))
	}
	if kc.Acks != "all" {
		// Kafka's idempotent producer needs acks=all. Without it one
		// request at a time per broker (kgo's default) keeps the order.
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	if kc.AutoCreateTopics {
		opts = append(opts, kgo.AllowAutoTopicCreation(), kgo.UnknownTopicRetries(-1))
	} else {
		opts = append(opts, kgo.UnknownTopicRetries(unknownTopicRetries))
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, tc, nil
}

// dialer returns the producer's dial function: TCP with raw system calls
// on the socket (no wake-up of the runtime's sysmon thread per request at
// low rates, see rawnet; WALPOST_RAWNET=off leaves the connection as
// dialed), under TLS when tc is not nil, its server name the broker's
// host unless tls.server_name gives one.
func dialer(timeout time.Duration, tc *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c = rawnet.Wrap(c)
		if tc == nil {
			return c, nil
		}
		cfg := tc.Clone()
		if cfg.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			cfg.ServerName = host
		}
		tlsConn := tls.Client(c, cfg)
		hctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := tlsConn.HandshakeContext(hctx); err != nil {
			c.Close()
			return nil, err
		}
		return tlsConn, nil
	}
}

// Name returns the sink's configured name.
func (s *Sink) Name() string { return s.name }

// Publish sends msgs, in order, and returns nil only when Kafka has
// acknowledged every one of them with the configured acks.
//
// A message whose topic (from the template) is not a legal Kafka name,
// or that alone is over batch_bytes, fails the whole call before anything
// is sent, with a publish.Rejected error naming it (relay.on_refused
// applies). The others are handed to the producer in order, which sends
// them in as few requests as batch_bytes allows, several in flight per
// partition, and retries what fails with the same producer id and
// sequence numbers, so that Kafka stores each record once and in order
// (see the package doc). A record the producer gives up on (timeout, or
// an error no retry helps) fails the call: Publish returns then,
// Permanent (see classify) when no retry can help, and marked with
// publish.Partial to report the messages Kafka acknowledged (of each
// topic, those before its first failed message), so that the retry
// sends only the others. When ctx ends Publish returns at once with an
// error wrapping ctx.Err(); a request already sent may still complete.
//
// Every error names the message (id and LSN) and topic it concerns.
func (s *Sink) Publish(ctx context.Context, msgs []*message.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kafka: publishing %s: %w", publish.DescribeCall(msgs), err)
	}
	recs, err := s.records(msgs)
	if err != nil {
		return err
	}
	if s.txn != nil {
		return s.publishTxn(ctx, msgs, recs)
	}
	c, errs, err := s.produce(ctx, s.client, recs, s.batchSize)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return publish.Partial(fmt.Errorf("kafka: publishing %s: %w", publish.DescribeCall(msgs), ctx.Err()), acked(recs, errs))
	}
	done := acked(recs, errs)
	notAcked := 0
	for _, d := range done {
		if !d {
			notAcked++
		}
	}
	return publish.Partial(s.failed(ctx, s.client, c, msgs, recs, errs, notAcked, len(msgs)), done)
}

// errNotAcked is produce's error when a record failed or is unanswered.
var errNotAcked = errors.New("kafka: not every record acknowledged")

// produce sends recs with cl in groups of group records, each once the one
// before it has every outcome, and returns the call's outcome: each
// record's (call.outcome, taken once), and a nil error when every record
// was acknowledged, errNotAcked when a record failed or was not answered
// within timeout (the groups after it are not sent), or ctx's error when
// ctx ended first.
func (s *Sink) produce(ctx context.Context, cl *kgo.Client, recs []kgo.Record, group int) (*call, []error, error) {
	// The records' context: one not yet sent when it ends is failed by
	// the producer (one sent and not answered is not: the producer waits
	// for its answer, so that its sequence numbers stay right).
	tctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	rctx, abort := context.WithCancelCause(tctx)
	defer abort(nil)
	defer s.conns.watch(abort)()
	c := newCall(len(recs))
	c.start = time.Now()
	for start := 0; start < len(recs); start += group {
		end := min(start+group, len(recs))
		if err := s.send(rctx, cl, c, recs, start, end); err != nil {
			if err := ctx.Err(); err != nil {
				return c, c.outcome(), err
			}
			break // not acknowledged within timeout: a broker cut off the network
		}
		if c.anyFailed() {
			break // the groups after a failed one are not sent
		}
	}
	// One snapshot: a late answer must not change the outcome between
	// deciding on it and describing it.
	errs := c.outcome()
	if slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
		return c, errs, errNotAcked
	}
	return c, errs, nil
}

// send hands recs[start:end] to cl, sends them, and waits until each has
// its outcome or ctx ends. The producer flushes by hand: a group's
// records are all buffered before any is sent, so that a record failing
// fails every later record of its partition in the group (the producer's
// gapless ordering) and none is stored after it. Records still buffered
// from an earlier call (its context ended before their answer came) are
// flushed first, for the same reason.
func (s *Sink) send(ctx context.Context, cl *kgo.Client, c *call, recs []kgo.Record, start, end int) error {
	if cl.BufferedProduceRecords() > 0 {
		if err := cl.Flush(ctx); err != nil {
			return err
		}
	}
	for i := start; i < end; i++ {
		cl.Produce(ctx, &recs[i], c.promise(i))
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	return c.wait(ctx, end-start)
}

// records maps msgs to their records. The records of one call are one
// allocation; the producer keeps pointers into it until it calls their
// promises, so it is never reused.
func (s *Sink) records(msgs []*message.Message) ([]kgo.Record, error) {
	recs := make([]kgo.Record, len(msgs))
	for i, m := range msgs {
		topic, err := s.topic.Expand(m)
		if err != nil {
			return nil, publish.Rejected(fmt.Errorf("kafka: %w", publish.NameError(m, "topic", topic, s.topic.Text(), err)))
		}
		if s.env.IsCloudEvents() {
			recs[i] = cloudEventsRecord(m, topic, &s.env)
		} else {
			recs[i] = record(m, topic)
		}
		if n := wireBound(&recs[i]) + recordBatchOverhead; n > s.batchBytes {
			return nil, publish.Rejected(fmt.Errorf("kafka: %s to topic %q: %d bytes with key and headers, over batch_bytes %d: %w (%w)",
				publish.Describe(m), topic, n, s.batchBytes, kerr.MessageTooLarge, errOverBatchBytes))
		}
	}
	return recs, nil
}

// call collects the outcome of one Publish call's records. Its promises
// may run on the producer's goroutines after Publish returned.
type call struct {
	start    time.Time
	mu       sync.Mutex
	errs     []error       // errs[i]: record i failed
	ok       []bool        // ok[i]: record i acknowledged
	answered chan struct{} // one token per record with its outcome
}

func newCall(n int) *call {
	return &call{errs: make([]error, n), ok: make([]bool, n), answered: make(chan struct{}, n)}
}

// promise returns the producer's callback for record i.
func (c *call) promise(i int) func(*kgo.Record, error) {
	return func(_ *kgo.Record, err error) {
		c.mu.Lock()
		if err != nil {
			c.errs[i] = err
		} else {
			c.ok[i] = true
		}
		c.mu.Unlock()
		c.answered <- struct{}{} // never blocks: one slot per record
	}
}

// wait waits for n more outcomes, or until ctx ends.
func (c *call) wait(ctx context.Context, n int) error {
	for range n {
		select {
		case <-c.answered:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// anyFailed reports whether a record failed.
func (c *call) anyFailed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.ContainsFunc(c.errs, func(err error) bool { return err != nil })
}

// outcome returns each record's outcome so far: nil when acknowledged,
// its error when failed, errUnanswered when still waiting.
func (c *call) outcome() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]error, len(c.errs))
	for i, err := range c.errs {
		switch {
		case err != nil:
			out[i] = err
		case !c.ok[i]:
			out[i] = errUnanswered
		}
	}
	return out
}

// errUnanswered is the outcome of a record the producer has sent, or
// could not send, and that Kafka has not acknowledged within timeout.
var errUnanswered = fmt.Errorf("kafka: not acknowledged within the sink's timeout: %w", context.DeadlineExceeded)

// acked returns which of a call's records Kafka acknowledged, as
// publish.Partial reports them: a record acknowledged (errs[i] nil),
// unless a record before it in the call to the same topic is not. The
// producer fails every record buffered for a partition after one it
// gives up on, so per partition the successes before the first failure
// are a prefix; going by topic (a failed record may not have a partition
// yet) reports less, never more.
func acked(recs []kgo.Record, errs []error) []bool {
	done := make([]bool, len(recs))
	var failedTopics map[string]bool
	for i := range recs {
		if errs[i] != nil {
			if failedTopics == nil {
				failedTopics = map[string]bool{}
			}
			failedTopics[recs[i].Topic] = true
			continue
		}
		done[i] = !failedTopics[recs[i].Topic]
	}
	return done
}

// record maps an outbox message to a Kafka record in format: raw: key =
// ordering key, value = payload as stored, headers id, type and then
// msg.Headers in key order (entries named id or type are left out: the
// message's own id and type win; so is every walpost-* one), then the
// relay's own (message.RelayHeaders), timestamp = commit time.
func record(m *message.Message, topic string) kgo.Record {
	hs := make([]kgo.RecordHeader, 0, 2+len(m.Headers))
	hs = append(hs, kgo.RecordHeader{Key: HeaderID, Value: []byte(m.ID)}, kgo.RecordHeader{Key: HeaderType, Value: []byte(m.Type)})
	hs = appendHeaders(hs, m.Headers, func(k string) bool { return k == HeaderID || k == HeaderType })
	return bare(m, topic, appendRelayHeaders(hs, m))
}

// cloudEventsRecord maps an outbox message to a Kafka record in format:
// cloudevents, binary content mode (docs/design.md, "Formats"): key,
// value and timestamp as record's; headers ce_specversion, ce_id,
// ce_source, ce_type, ce_time (the commit time, when known), content-type
// (the datacontenttype), ce_partitionkey (the outbox key, unless NULL),
// then msg.Headers in key order, leaving out entries that would read as
// CloudEvents attributes (a name starting with ce_ in any case) or as the
// content type: the message's own attributes win; then the relay's own
// headers (message.RelayHeaders). The raw id and type headers are not
// written: a sink writes one form.
func cloudEventsRecord(m *message.Message, topic string, env *envelope.Settings) kgo.Record {
	attrs := env.Attributes(m)
	hs := make([]kgo.RecordHeader, 0, len(attrs)+2+len(m.Headers))
	for _, a := range attrs {
		hs = append(hs, kgo.RecordHeader{Key: PrefixCloudEvents + a.Name, Value: []byte(a.Value)})
	}
	hs = append(hs, kgo.RecordHeader{Key: HeaderContentType, Value: []byte(envelope.ContentType(m))})
	if m.HasKey {
		hs = append(hs, kgo.RecordHeader{Key: HeaderPartitionKey, Value: []byte(m.Key)})
	}
	hs = appendHeaders(hs, m.Headers, reservedCloudEvents)
	return bare(m, topic, appendRelayHeaders(hs, m))
}

// reservedCloudEvents reports whether a headers column entry named k would
// collide with the CloudEvents binding's headers.
func reservedCloudEvents(k string) bool {
	return strings.EqualFold(k, HeaderContentType) || envelope.HasPrefixFold(k, PrefixCloudEvents)
}

// appendHeaders appends the entries of the headers column in key order,
// leaving out those skip reports.
func appendHeaders(hs []kgo.RecordHeader, headers map[string]string, skip func(string) bool) []kgo.RecordHeader {
	if len(headers) == 0 {
		return hs
	}
	keys := make([]string, 0, len(headers))
	for k := range headers {
		if !publish.KeepRowHeader(k) {
			continue
		}
		if skip(k) {
			publish.LeaveOutRowHeader(k, publish.OwnRowHeader)
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(headers[k])})
	}
	return hs
}

// appendRelayHeaders appends the relay's own headers of m
// (message.RelayHeaders), after the headers column's entries, none of
// which may have their names (publish.RowHeaderDenied).
func appendRelayHeaders(hs []kgo.RecordHeader, m *message.Message) []kgo.RecordHeader {
	for _, h := range m.RelayHeaders() {
		hs = append(hs, kgo.RecordHeader{Key: h.Name, Value: []byte(h.Value)})
	}
	return hs
}

// bare returns m's record with headers hs: key = ordering key, value =
// payload as stored (never nil: nil is a tombstone), timestamp = the
// message's time (columns.time when mapped, else the commit time; now when
// unknown). Keys and header values are converted with []byte(s), which
// is never nil, not even for "" (nil would be sent as null, not empty).
func bare(m *message.Message, topic string, hs []kgo.RecordHeader) kgo.Record {
	value := m.Payload
	if value == nil {
		value = []byte{} // nil would be a tombstone
	}
	ts := m.EventTime()
	if ts.IsZero() {
		ts = time.Now()
	}
	return kgo.Record{
		Topic:     topic,
		Key:       []byte(m.OrderingKey()),
		Value:     value,
		Headers:   hs,
		Timestamp: ts,
	}
}

// recordBatchOverhead is the size of a v2 record batch's header.
const recordBatchOverhead = 61

// wireBound bounds the bytes r takes in a v2 record batch: every varint of
// the record at its longest.
func wireBound(r *kgo.Record) int64 {
	n := int64(5 + 1 + 10 + 5 + 5 + len(r.Key) + 5 + len(r.Value) + 5)
	for _, h := range r.Headers {
		n += int64(5 + len(h.Key) + 5 + len(h.Value))
	}
	return n
}

// failed turns the outcome of a call with failed records (errs[i] is the
// error of recs[i], the record of msgs[i]; notAcked of the call's total
// messages are not acknowledged) into the error Publish returns: it names
// the message the error concerns (the first failed one, or the first
// whose error is permanent) and marks it Permanent or Rejected when
// classify says so; the caller adds publish.Partial. After a transient
// error it asks cl for fresh metadata.
func (s *Sink) failed(ctx context.Context, cl *kgo.Client, c *call, msgs []*message.Message, recs []kgo.Record, errs []error, notAcked, total int) error {
	idx := -1
	var v verdict
	for i, e := range errs {
		if e == nil {
			continue
		}
		if e == errUnanswered || errors.Is(e, context.DeadlineExceeded) || errors.Is(e, context.Canceled) {
			// The producer is still trying (or was when time ran out):
			// when it cannot connect, that says why.
			if ce := s.conns.since(c.start); ce != nil {
				e = fmt.Errorf("%w; connecting to the brokers: %w", e, ce)
				errs[i] = e
			}
		}
		if iv := classify(e, s.autoCreate); idx < 0 || iv.permanent && !v.permanent ||
			errs[idx] == errUnanswered && e != errUnanswered {
			idx, v = i, iv
		}
	}
	if idx < 0 { // cannot happen: produce returns errNotAcked only with an error in errs
		idx, errs = 0, append([]error{errNotAcked}, errs[1:]...)
	}
	cause := errs[idx]
	if errors.Is(cause, kerr.MessageTooLarge) {
		// The broker refuses a whole request as too large: name its
		// largest message, the likely culprit.
		for i, e := range errs {
			if e != nil && errors.Is(e, kerr.MessageTooLarge) && wireBound(&recs[i]) > wireBound(&recs[idx]) {
				idx, cause = i, e
			}
		}
	}
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(cause, ctxErr) {
		return fmt.Errorf("kafka: publishing %s to topic %q: %w", publish.DescribeCall(msgs), recs[idx].Topic, cause)
	}
	if v.permanent && !s.topic.Fixed() && refusesTopic(cause) {
		// A topic the message's type or key chose: other messages may go
		// to other topics, and a name a message chose must never stop the
		// relay for good (docs/security.md).
		v.rejected = true
		v.hint += fmt.Sprintf("; the topic comes from the message's type or key (topic %q): or park the message with relay.on_refused: dead_letter", s.topic.Text())
	}
	msg := fmt.Sprintf("kafka: %s to topic %q", publish.Describe(msgs[idx]), recs[idx].Topic)
	if total > 1 {
		msg += fmt.Sprintf(" (%d of the call's %d messages not acknowledged)", notAcked, total)
	}
	var err error
	if v.hint != "" {
		err = fmt.Errorf("%s: %w; %s", msg, cause, v.hint)
	} else {
		err = fmt.Errorf("%s: %w", msg, cause)
	}
	switch {
	case v.rejected:
		err = publish.Rejected(err)
	case v.permanent:
		err = publish.Permanent(err)
	default:
		// The retry starts from fresh metadata: a moved leader, a
		// restarted broker or a new topic is found at once.
		cl.ForceMetadataRefresh()
	}
	return err
}

// connErrs is a kgo hook that keeps the producer's last failed attempt to
// connect to a broker (dial, TLS handshake, SASL): the producer retries
// those itself, and a record that times out waiting for one carries only
// the timeout. Safe for concurrent use.
type connErrs struct {
	last atomic.Pointer[connErr]

	mu    sync.Mutex
	abort context.CancelCauseFunc // ends the waiting call's records' context; nil when none waits
}

type connErr struct {
	err error
	at  time.Time
}

var _ kgo.HookBrokerConnect = (*connErrs)(nil)

// OnBrokerConnect implements kgo.HookBrokerConnect: it keeps a failure and
// forgets it on the next connection that succeeds. A failure no retry
// fixes (classify: a certificate that does not verify, credentials the
// brokers reject) also ends the waiting call at once, instead of at its
// timeout.
func (h *connErrs) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		h.last.Store(nil)
		return
	}
	h.last.Store(&connErr{err: err, at: time.Now()})
	if classify(err, false).permanent {
		h.mu.Lock()
		if h.abort != nil {
			h.abort(err)
		}
		h.mu.Unlock()
	}
}

// watch makes abort the function a permanent connection failure calls,
// until the returned stop.
func (h *connErrs) watch(abort context.CancelCauseFunc) (stop func()) {
	h.mu.Lock()
	h.abort = abort
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		h.abort = nil
		h.mu.Unlock()
	}
}

// since returns the last connection failure if it came after t, else nil.
func (h *connErrs) since(t time.Time) error {
	if ce := h.last.Load(); ce != nil && !ce.at.Before(t) {
		return ce.err
	}
	return nil
}

// Close fails the records still buffered after a canceled Publish (the
// relay sends them again) and closes the connections. It is safe to call
// more than once.
func (s *Sink) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		if s.txn != nil && s.txn.client != nil {
			s.txn.client.Close()
		}
		s.mu.Unlock()
		s.client.Close()
	})
	return nil
}
