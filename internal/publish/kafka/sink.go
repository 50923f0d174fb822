package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	kafka "github.com/segmentio/kafka-go"

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
	batchSize  int
	timeout    time.Duration

	transport *kafka.Transport
	meta      *metaCache // the writer's transport: tr, with metadata kept per Publish call
	writer    *kafka.Writer

	mu  sync.Mutex      // serializes Publish; guards topic's cache and buf
	buf []kafka.Message // reused between calls (kafka-go copies the values)

	closeOnce sync.Once
	closeErr  error
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

// open builds the sink from validated settings.
func open(name string, kc kafkaConfig, log zerolog.Logger) (*Sink, error) {
	topic, err := parseTopic(kc.Topic)
	if err != nil {
		return nil, err
	}
	acks, err := requiredAcks(kc.Acks)
	if err != nil {
		return nil, err
	}
	comp, err := compression(kc.Compression)
	if err != nil {
		return nil, err
	}
	tc, err := kc.TLS.Build()
	if err != nil {
		return nil, err
	}
	mech, err := kc.SASL.mechanism()
	if err != nil {
		return nil, err
	}
	timeout := kc.Timeout.D()
	dialer := &net.Dialer{Timeout: timeout}
	tr := &kafka.Transport{
		// Raw system calls on the broker's sockets: no wake-up of the
		// runtime's sysmon thread per request at low rates (see rawnet;
		// WALPOST_RAWNET=off leaves the connection as dialed).
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return rawnet.Wrap(c), nil
		},
		DialTimeout: timeout,
		ClientID:    kc.ClientID,
		TLS:         tc,
		SASL:        mech,
	}
	linger := kc.Linger.D()
	if linger <= 0 {
		// kafka-go reads 0 as its default of 1s. A partition's messages of
		// one call are added under one lock, so the shortest timer still
		// sends them as one request.
		linger = time.Nanosecond
	}
	meta := newMetaCache(tr)
	w := &kafka.Writer{
		Addr:     kafka.TCP(kc.Brokers...),
		Balancer: keyBalancer{kafka.Murmur2Balancer{Consistent: true}},
		// One attempt: the relay retries the whole batch, so that a retry
		// never sends a later request of a partition before an earlier
		// one that failed (see the package doc).
		MaxAttempts:            1,
		BatchSize:              kc.BatchSize,
		BatchBytes:             kc.BatchBytes,
		BatchTimeout:           linger,
		ReadTimeout:            timeout,
		WriteTimeout:           timeout,
		RequiredAcks:           acks,
		Compression:            comp,
		Transport:              meta,
		AllowAutoTopicCreation: kc.AutoCreateTopics,
	}
	s := &Sink{
		name:       name,
		log:        log,
		topic:      topic,
		env:        kc.Settings,
		autoCreate: kc.AutoCreateTopics,
		batchBytes: kc.BatchBytes,
		batchSize:  kc.BatchSize,
		timeout:    timeout,
		transport:  tr,
		meta:       meta,
		writer:     w,
	}
	if acks == kafka.RequireNone {
		log.Warn().Msg("kafka sink with acks: none: Publish cannot know that Kafka stored a message, so a broker failure can lose messages the slot has already confirmed")
	}
	if tc != nil && tc.InsecureSkipVerify {
		log.Warn().Msg("kafka sink with tls.insecure_skip_verify: the brokers' certificates are not verified, " +
			"so a man-in-the-middle can read and alter messages (and credentials); set tls.ca_file instead")
	}
	if kc.SASL != nil && kc.SASL.Mechanism == "PLAIN" && tc == nil {
		log.Warn().Msg("kafka sink with SASL PLAIN but without TLS: the password crosses the network in clear text")
	}
	if kc.AutoCreateTopics && strings.HasPrefix(kc.Topic, "{") {
		log.Warn().Str("topic", kc.Topic).Msg("kafka sink with auto_create_topics: true and a topic template that starts with a placeholder: " +
			"whoever writes outbox rows can have the brokers create a topic of any name; give the template a prefix (\"outbox.{type}\") " +
			"or leave auto_create_topics off (docs/security.md)")
	}
	log.Info().Strs("brokers", kc.Brokers).Str("topic", kc.Topic).Str("acks", kc.Acks).
		Str("compression", kc.Compression).Str("format", kc.Format).Bool("tls", tc != nil).Msg("kafka sink configured")
	rawnet.Setting().Log(log, "raw system calls on the Kafka brokers' sockets (internal/rawnet)")
	return s, nil
}

// keyBalancer picks a record's partition from its key with murmur2, like
// the Java client's default partitioner. It guards against an empty
// partition list, which kafka-go would pass for a topic whose metadata
// lists no partitions yet (while being created) and which would make the
// murmur2 balancer divide by zero: partition 0 is chosen and the produce
// request then fails with a retriable error.
type keyBalancer struct{ murmur kafka.Murmur2Balancer }

func (b keyBalancer) Balance(msg kafka.Message, partitions ...int) int {
	if len(partitions) == 0 {
		return 0
	}
	return b.murmur.Balance(msg, partitions...)
}

// Name returns the sink's configured name.
func (s *Sink) Name() string { return s.name }

// Publish sends msgs, in order, and returns nil only when Kafka has
// acknowledged every one of them with the configured acks.
//
// A message whose topic (from the template) is not a legal Kafka name
// fails the whole call before anything is sent, with a publish.Rejected
// error naming it (relay.on_refused applies). The messages are sent in as few produce requests as
// batch_size and batch_bytes allow, one request per partition at a time:
// a later group of requests only once every request of the group before
// it was acknowledged. On the first failure Publish returns; Permanent
// (see classify) when no retry can help; and marked with publish.Partial
// to report the messages Kafka acknowledged (the groups before the failed
// one, and the messages of partitions whose request in it succeeded), so
// that the retry sends only the others. After a transient failure the
// cached cluster metadata is dropped, so that the retry finds moved
// leaders. When ctx ends Publish returns at once with an error wrapping
// ctx.Err(); a request already sent may still complete.
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
	km := s.buf[:0]
	defer func() {
		clear(km) // drop references to payloads
		s.buf = km[:0]
	}()
	for _, m := range msgs {
		topic, err := s.topic.Expand(m)
		if err != nil {
			return publish.Rejected(fmt.Errorf("kafka: %w", publish.NameError(m, "topic", topic, s.topic.Text(), err)))
		}
		if s.env.IsCloudEvents() {
			km = append(km, cloudEventsRecord(m, topic, &s.env))
		} else {
			km = append(km, record(m, topic))
		}
	}
	for start := 0; start < len(km); {
		end, err := s.chunkEnd(msgs, km, start)
		if err != nil {
			// The groups before this one were acknowledged.
			return publish.Partial(err, acked(len(msgs), start, nil))
		}
		// kafka-go gives every partition's batch room for BatchSize
		// messages up front (about 150 bytes each), whatever the call
		// holds: with the configured 1,000 that is ~150 KB per partition
		// per call, which at low rates made garbage collection a large
		// part of the relay's CPU. The group is at most batch_size
		// messages, so a BatchSize of exactly its length still puts each
		// partition's share into one request, and a partition that gets
		// the whole group is sent at once. Publish calls are serialized
		// (s.mu) and kafka-go reads BatchSize only inside WriteMessages,
		// in this goroutine.
		s.writer.BatchSize = end - start
		s.meta.reset() // metadata looked up once per topic in this call (see metaCache)
		if err := s.writer.WriteMessages(ctx, km[start:end]...); err != nil {
			// The groups before this one were acknowledged, and of this
			// one the partitions whose request succeeded.
			var werrs kafka.WriteErrors
			if !errors.As(err, &werrs) || len(werrs) != end-start {
				werrs = nil
			}
			return publish.Partial(s.failed(ctx, err, msgs[start:end], km[start:end], start, len(msgs)),
				acked(len(msgs), start, werrs))
		}
		start = end
	}
	return nil
}

// acked returns which of a call's n messages Kafka acknowledged when the
// group starting at start failed: every message before start, and each of
// the group's for which werrs (the group's WriteErrors, or nil) holds nil.
// kafka-go sets a message's entry to its produce request's error, so nil
// means the request holding it succeeded.
func acked(n, start int, werrs kafka.WriteErrors) []bool {
	done := publish.DonePrefix(n, start)
	for i, e := range werrs {
		done[start+i] = e == nil
	}
	return done
}

// record maps an outbox message to a Kafka record in format: raw: key =
// ordering key, value = payload as stored, headers id, type and then
// msg.Headers in key order (entries named id or type are left out: the
// message's own id and type win), timestamp = commit time.
func record(m *message.Message, topic string) kafka.Message {
	hs := make([]kafka.Header, 0, 2+len(m.Headers))
	hs = append(hs, kafka.Header{Key: HeaderID, Value: []byte(m.ID)}, kafka.Header{Key: HeaderType, Value: []byte(m.Type)})
	hs = appendHeaders(hs, m.Headers, func(k string) bool { return k == HeaderID || k == HeaderType })
	return bare(m, topic, hs)
}

// cloudEventsRecord maps an outbox message to a Kafka record in format:
// cloudevents, binary content mode (docs/design.md, "Formats"): key,
// value and timestamp as record's; headers ce_specversion, ce_id,
// ce_source, ce_type, ce_time (the commit time, when known), content-type
// (the datacontenttype), ce_partitionkey (the outbox key, unless NULL),
// then msg.Headers in key order, leaving out entries that would read as
// CloudEvents attributes (a name starting with ce_ in any case) or as the
// content type: the message's own attributes win. The raw id and type
// headers are not written: a sink writes one form.
func cloudEventsRecord(m *message.Message, topic string, env *envelope.Settings) kafka.Message {
	attrs := env.Attributes(m)
	hs := make([]kafka.Header, 0, len(attrs)+2+len(m.Headers))
	for _, a := range attrs {
		hs = append(hs, kafka.Header{Key: PrefixCloudEvents + a.Name, Value: []byte(a.Value)})
	}
	hs = append(hs, kafka.Header{Key: HeaderContentType, Value: []byte(envelope.ContentType(m))})
	if m.HasKey {
		hs = append(hs, kafka.Header{Key: HeaderPartitionKey, Value: []byte(m.Key)})
	}
	hs = appendHeaders(hs, m.Headers, reservedCloudEvents)
	return bare(m, topic, hs)
}

// reservedCloudEvents reports whether a headers column entry named k would
// collide with the CloudEvents binding's headers.
func reservedCloudEvents(k string) bool {
	return strings.EqualFold(k, HeaderContentType) || envelope.HasPrefixFold(k, PrefixCloudEvents)
}

// appendHeaders appends the entries of the headers column in key order,
// leaving out those skip reports.
func appendHeaders(hs []kafka.Header, headers map[string]string, skip func(string) bool) []kafka.Header {
	if len(headers) == 0 {
		return hs
	}
	keys := make([]string, 0, len(headers))
	for k := range headers {
		if !skip(k) && publish.KeepRowHeader(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		hs = append(hs, kafka.Header{Key: k, Value: []byte(headers[k])})
	}
	return hs
}

// bare returns m's record with headers hs: key = ordering key, value =
// payload as stored (never nil: nil is a tombstone), timestamp = the
// message's time (columns.time when mapped, else the commit time; now when
// unknown). Keys and header values are converted with []byte(s), which
// is never nil, not even for "" (nil would be sent as null, not empty).
func bare(m *message.Message, topic string, hs []kafka.Header) kafka.Message {
	value := m.Payload
	if value == nil {
		value = []byte{} // nil would be a tombstone
	}
	ts := m.EventTime()
	if ts.IsZero() {
		ts = time.Now()
	}
	return kafka.Message{
		Topic:   topic,
		Key:     []byte(m.OrderingKey()),
		Value:   value,
		Headers: hs,
		Time:    ts,
	}
}

// recordBatchOverhead is the size of a v2 record batch's header.
const recordBatchOverhead = 61

// kgoSize is kafka-go's own estimate of a message (Message.totalSize in
// kafka-go v0.4.51), which it compares with BatchBytes.
func kgoSize(m *kafka.Message) int64 {
	n := int64(4 + 1 + 1 + 4 + len(m.Key) + 4 + len(m.Value) + 8)
	n += int64(varintLen(len(m.Headers)))
	for _, h := range m.Headers {
		n += int64(varintLen(len(h.Key)) + len(h.Key) + varintLen(len(h.Value)) + len(h.Value))
	}
	return n
}

// wireBound bounds the bytes m takes in a v2 record batch: every varint of
// the record at its longest.
func wireBound(m *kafka.Message) int64 {
	n := int64(5 + 1 + 10 + 5 + 5 + len(m.Key) + 5 + len(m.Value) + 5)
	for _, h := range m.Headers {
		n += int64(5 + len(h.Key) + 5 + len(h.Value))
	}
	return n
}

func varintLen(x int) int {
	u := uint64(int64(x)<<1) ^ uint64(int64(x)>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// chunkEnd returns the end of the group of messages starting at start that
// goes out in one WriteMessages call. A group is small enough that
// kafka-go puts each partition's share of it into a single produce
// request (at most batch_size messages, and with the record batch
// overhead at most batch_bytes in all), so that no request of a partition
// can succeed after an earlier one of the same partition failed. A single
// message over batch_bytes by kafka-go's own measure is a Permanent error
// naming it.
func (s *Sink) chunkEnd(msgs []*message.Message, km []kafka.Message, start int) (int, error) {
	size := int64(recordBatchOverhead)
	end := start
	for end < len(km) && end-start < s.batchSize {
		m := &km[end]
		if n := kgoSize(m); n > s.batchBytes {
			return 0, publish.Rejected(fmt.Errorf("kafka: %s to topic %q: %d bytes with key and headers, over batch_bytes %d: %w",
				publish.Describe(msgs[end]), m.Topic, n, s.batchBytes, kafka.MessageSizeTooLarge))
		}
		size += wireBound(m)
		if size > s.batchBytes && end > start {
			break
		}
		end++
	}
	return end, nil
}

// failed turns an error of WriteMessages for the group msgs (km[i] is the
// record of msgs[i]) into the error Publish returns: it names the message
// the error concerns, marks it Permanent when classify says so, and after
// a transient error drops the cached metadata. acked messages of the call
// (those before msgs) were acknowledged; total is the call's size.
func (s *Sink) failed(ctx context.Context, err error, msgs []*message.Message, km []kafka.Message, acked, total int) error {
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return fmt.Errorf("kafka: publishing %s to topic %q: %w", publish.DescribeCall(msgs), km[0].Topic, err)
	}
	var (
		idx    int
		cause  = err
		v      verdict
		failed = len(msgs)
	)
	var werrs kafka.WriteErrors
	if errors.As(err, &werrs) && len(werrs) == len(msgs) {
		idx, failed = -1, 0
		for i, e := range werrs {
			if e == nil {
				continue
			}
			failed++
			if iv := classify(e, s.autoCreate); idx < 0 || iv.permanent && !v.permanent {
				idx, cause, v = i, e, iv
			}
		}
		if idx < 0 { // cannot happen: kafka-go returns WriteErrors only with an error in it
			idx, v = 0, classify(err, s.autoCreate)
		}
		// The broker refuses a whole request as too large: name its
		// largest message, the likely culprit.
		if errors.Is(cause, kafka.MessageSizeTooLarge) {
			for i, e := range werrs {
				if e != nil && errors.Is(e, kafka.MessageSizeTooLarge) && kgoSize(&km[i]) > kgoSize(&km[idx]) {
					idx, cause = i, e
				}
			}
		}
	} else {
		v = classify(err, s.autoCreate)
		if v.permanent {
			// A metadata error (unknown topic, not authorized) comes
			// before anything is sent, for the first message whose topic
			// fails.
			idx = s.culprit(ctx, km)
		}
	}
	if v.permanent && !s.topic.Fixed() && refusesTopic(cause) {
		// A topic the message's type or key chose: other messages may go
		// to other topics, and a name a message chose must never stop the
		// relay for good (docs/security.md).
		v.rejected = true
		v.hint += fmt.Sprintf("; the topic comes from the message's type or key (topic %q): or park the message with relay.on_refused: dead_letter", s.topic.Text())
	}
	m := msgs[idx]
	msg := fmt.Sprintf("kafka: %s to topic %q", publish.Describe(m), km[idx].Topic)
	if total > 1 {
		// Earlier groups were acknowledged, later ones not sent.
		notAcked := total - acked - (len(msgs) - failed)
		msg += fmt.Sprintf(" (%d of the call's %d messages not acknowledged)", notAcked, total)
	}
	if v.hint != "" {
		err = fmt.Errorf("%s: %w; %s", msg, cause, v.hint)
	} else {
		err = fmt.Errorf("%s: %w", msg, cause)
	}
	if v.rejected {
		return publish.Rejected(err)
	}
	if v.permanent {
		return publish.Permanent(err)
	}
	// The retry starts from fresh metadata: a moved leader, a restarted
	// broker or a new topic is found at once instead of after the
	// metadata TTL.
	s.transport.CloseIdleConnections()
	return err
}

// culprit returns the index of the first record whose topic's metadata
// carries an error, or 0 when that cannot be told. It reads the metadata
// kafka-go cached, the same that failed the write.
func (s *Sink) culprit(ctx context.Context, km []kafka.Message) int {
	topics := map[string]bool{}
	var order []int
	for i := range km {
		if !topics[km[i].Topic] {
			topics[km[i].Topic] = true
			order = append(order, i)
		}
	}
	if len(order) == 1 {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	client := &kafka.Client{Addr: s.writer.Addr, Transport: s.transport, Timeout: s.timeout}
	for _, i := range order {
		res, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{km[i].Topic}})
		if err != nil {
			return 0
		}
		for _, t := range res.Topics {
			if t.Name == km[i].Topic && t.Error != nil {
				return i
			}
		}
	}
	return 0
}

// Close flushes nothing new (Publish is synchronous), waits for requests
// still in flight after a canceled Publish, and closes the connections.
// It is safe to call more than once; later calls return the first result.
func (s *Sink) Close() error {
	s.closeOnce.Do(func() {
		if err := s.writer.Close(); err != nil {
			s.closeErr = fmt.Errorf("kafka: closing sink %s: %w", s.name, err)
		}
		s.transport.CloseIdleConnections()
	})
	return s.closeErr
}
