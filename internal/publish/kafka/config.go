package kafka

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/publish/nametmpl"
	"github.com/walpost/walpost/internal/publish/tlsconf"
)

// kafkaConfig holds a kafka sink's own settings: the keys of its YAML
// mapping besides name, kind and route (see the package doc).
type kafkaConfig struct {
	// Settings are format (raw or cloudevents) and source, the keys every
	// sink has (docs/design.md, "Formats").
	envelope.Settings `yaml:",inline"`
	// Brokers are the bootstrap brokers, host:port; at least one.
	Brokers []string `yaml:"brokers"`
	// Topic is a topic name or a template with {type} and {key}.
	Topic string `yaml:"topic"`
	// Acks is all (every in-sync replica, the default), leader or none.
	Acks string `yaml:"acks"`
	// BatchBytes is the most bytes one produce request carries (default
	// 1048576). It must not exceed the topics' max.message.bytes.
	BatchBytes int64 `yaml:"batch_bytes"`
	// BatchSize is the most messages Publish buffers and then sends
	// together (default 1000, the relay's default batch); a group's
	// requests carry at most batch_bytes each.
	BatchSize int `yaml:"batch_size"`
	// Linger is accepted and validated for configurations that set it,
	// and has no effect: Publish buffers a group of records and flushes
	// it at once (the relay hands a sink whole batches, so waiting never
	// made requests bigger, only slower).
	Linger *config.Duration `yaml:"linger"`
	// Compression is none (default), gzip, snappy, lz4 or zstd.
	Compression string `yaml:"compression"`
	// ClientID is the client.id the brokers see (default walpost).
	ClientID string `yaml:"client_id"`
	// AutoCreateTopics lets the brokers create a missing topic (when they
	// allow it). When false (the default) a missing topic is a Permanent
	// error.
	AutoCreateTopics bool `yaml:"auto_create_topics"`
	// TLS configures encryption; off by default.
	TLS tlsconf.Switch `yaml:"tls"`
	// SASL configures authentication; nil means none.
	SASL *saslConfig `yaml:"sasl"`
	// ExactlyOnce makes each batch one Kafka transaction that also writes
	// the sink's progress to ProgressTopic, under a transactional id
	// derived from the slot and the sink's name, and lets the relay
	// resume the sink from that progress (docs/sinks/kafka.md, "Exactly
	// once"). It needs acks: all. Receivers must read with
	// isolation.level=read_committed.
	ExactlyOnce bool `yaml:"exactly_once"`
	// ProgressTopic is the compacted topic of the sinks' progress with
	// exactly_once (default walpost.progress); the sink creates it when
	// it is missing. Only with exactly_once.
	ProgressTopic string `yaml:"progress_topic"`
	// Timeout bounds one write attempt: dialing, a metadata request, a
	// produce request and its acknowledgement (default 10s).
	Timeout config.Duration `yaml:"timeout"`
	// ProtocolVersion caps the request versions the sink uses to those of
	// this Kafka release ("2.1", "3.7", …); empty (the default) uses the
	// newest both the client and each broker know, as negotiated by
	// ApiVersions. For brokers, proxies and emulators that mishandle a
	// newer request than they know instead of answering it as KIP-511
	// says (librdkafka's mock cluster: docs/testing.md, "Kafka: two
	// implementations").
	ProtocolVersion string `yaml:"protocol_version"`
}

const (
	defaultBatchBytes = 1 << 20
	defaultBatchSize  = 1000
	defaultLinger     = 0
	defaultTimeout    = 10 * time.Second
	defaultClientID   = "walpost"
	// defaultProgressTopic holds the sinks' progress with exactly_once.
	defaultProgressTopic = "walpost.progress"
)

// limits is the table of allowed ranges, checked by validate.
var limits = struct {
	batchBytes    [2]int64
	batchSize     [2]int
	linger        [2]time.Duration
	timeout       [2]time.Duration
	clientIDChars int
}{
	batchBytes:    [2]int64{1 << 10, 1 << 30},
	batchSize:     [2]int{1, 100_000},
	linger:        [2]time.Duration{0, 5 * time.Second},
	timeout:       [2]time.Duration{100 * time.Millisecond, 10 * time.Minute},
	clientIDChars: 255,
}

func (c *kafkaConfig) SetDefaults() {
	c.Settings.SetDefaults()
	if c.Acks == "" {
		c.Acks = "all"
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = defaultBatchBytes
	}
	if c.BatchSize == 0 {
		c.BatchSize = defaultBatchSize
	}
	if c.Linger == nil {
		d := config.Duration(defaultLinger)
		c.Linger = &d
	}
	if c.Compression == "" {
		c.Compression = "none"
	}
	if c.ClientID == "" {
		c.ClientID = defaultClientID
	}
	if c.Timeout == 0 {
		c.Timeout = config.Duration(defaultTimeout)
	}
	if c.SASL != nil {
		c.SASL.Mechanism = strings.ToUpper(c.SASL.Mechanism)
	}
	if c.ExactlyOnce && c.ProgressTopic == "" {
		c.ProgressTopic = defaultProgressTopic
	}
}

// Validate checks every field and names the first bad one, starting at the
// field ("brokers: empty"); the registry prefixes the sink.
func (c *kafkaConfig) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New(`brokers: empty (list at least one, e.g. ["127.0.0.1:9092"])`)
	}
	for i, b := range c.Brokers {
		host, port, err := net.SplitHostPort(b)
		if err != nil || host == "" {
			return fmt.Errorf("brokers[%d]: %q is not host:port", i, b)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return fmt.Errorf("brokers[%d]: %q: port %q is not 1..65535", i, b, port)
		}
	}
	if _, err := parseTopic(c.Topic); err != nil {
		return err
	}
	if _, err := requiredAcks(c.Acks); err != nil {
		return err
	}
	if c.BatchBytes < limits.batchBytes[0] || c.BatchBytes > limits.batchBytes[1] {
		return fmt.Errorf("batch_bytes: %d is outside %d..%d", c.BatchBytes, limits.batchBytes[0], limits.batchBytes[1])
	}
	if c.BatchSize < limits.batchSize[0] || c.BatchSize > limits.batchSize[1] {
		return fmt.Errorf("batch_size: %d is outside %d..%d", c.BatchSize, limits.batchSize[0], limits.batchSize[1])
	}
	if l := c.Linger.D(); l < limits.linger[0] || l > limits.linger[1] {
		return fmt.Errorf("linger: %s is outside %s..%s", l, limits.linger[0], limits.linger[1])
	}
	if _, err := compression(c.Compression); err != nil {
		return err
	}
	if len(c.ClientID) > limits.clientIDChars {
		return fmt.Errorf("client_id: %d characters, over %d", len(c.ClientID), limits.clientIDChars)
	}
	if t := c.Timeout.D(); t < limits.timeout[0] || t > limits.timeout[1] {
		return fmt.Errorf("timeout: %s is outside %s..%s", t, limits.timeout[0], limits.timeout[1])
	}
	if err := c.TLS.Validate(); err != nil {
		return err
	}
	if c.SASL != nil {
		if err := c.SASL.validate(c.TLS.Enabled); err != nil {
			return err
		}
	}
	if c.ProtocolVersion != "" && c.maxVersions() == nil {
		return fmt.Errorf("protocol_version: %q is not a Kafka release franz-go knows (write it as 2.1 or 3.7)", c.ProtocolVersion)
	}
	if err := c.validateExactlyOnce(); err != nil {
		return err
	}
	return c.Settings.Validate()
}

func requiredAcks(s string) (kgo.Acks, error) {
	switch s {
	case "all":
		return kgo.AllISRAcks(), nil
	case "leader":
		return kgo.LeaderAck(), nil
	case "none":
		return kgo.NoAck(), nil
	}
	return kgo.Acks{}, fmt.Errorf("acks: %q is not all, leader or none", s)
}

func compression(s string) (kgo.CompressionCodec, error) {
	switch s {
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("compression: %q is not none, gzip, snappy, lz4 or zstd", s)
}

func (c *kafkaConfig) validateExactlyOnce() error {
	if !c.ExactlyOnce {
		if c.ProgressTopic != "" {
			return errors.New("progress_topic: only with exactly_once: true")
		}
		return nil
	}
	if c.Acks != "all" {
		return fmt.Errorf("exactly_once: needs acks: all (Kafka's transactions need the idempotent producer), not %s", c.Acks)
	}
	t, err := nametmpl.Parse("progress_topic", c.ProgressTopic, topicRules)
	if err != nil {
		return err
	}
	if !t.Fixed() {
		return fmt.Errorf("progress_topic: %q: a fixed name, not a template", c.ProgressTopic)
	}
	return nil
}

// maxVersions returns the request versions of ProtocolVersion, nil when
// it is empty or names no release.
func (c *kafkaConfig) maxVersions() *kversion.Versions {
	if c.ProtocolVersion == "" {
		return nil
	}
	return kversion.FromString(c.ProtocolVersion)
}
