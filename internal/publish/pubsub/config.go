package pubsub

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/publish/envelope"
)

// psConfig holds a pubsub sink's own settings: the keys of its YAML
// mapping besides name, kind and route (see the package doc).
type psConfig struct {
	// Settings are format (raw or cloudevents) and source, the keys every
	// sink has (docs/design.md, "Formats").
	envelope.Settings `yaml:",inline"`

	// Project is the Google Cloud project of the topics.
	Project string `yaml:"project"`
	// Topic is the topic ID, which may be a template with {type} and {key}.
	Topic string `yaml:"topic"`
	// Endpoint overrides the service endpoint (host:port), e.g. a regional
	// endpoint (europe-west1-pubsub.googleapis.com:443) or Private Service
	// Connect; credentials still come from ADC.
	Endpoint string `yaml:"endpoint"`
	// EmulatorHost (host:port) sends to a Pub/Sub emulator: plaintext and
	// no credentials, as PUBSUB_EMULATOR_HOST does.
	EmulatorHost string `yaml:"emulator_host"`

	// BatchCount, BatchBytes and BatchDelay are the client's bundling:
	// a request is sent when it holds this many messages or bytes, or
	// this long after its first message.
	BatchCount int             `yaml:"batch_count"`
	BatchBytes int             `yaml:"batch_bytes"`
	BatchDelay config.Duration `yaml:"batch_delay"`

	// Timeout bounds one Publish call, the client's own retries of a
	// request included (default 1m).
	Timeout config.Duration `yaml:"timeout"`
}

const (
	defaultBatchCount = 100
	defaultBatchBytes = 1_000_000
	defaultBatchDelay = 10 * time.Millisecond
	defaultTimeout    = time.Minute
	// maxRequestBytes is Pub/Sub's limit of a publish request (and so of
	// a message).
	maxRequestBytes = 10_000_000
)

var limits = struct {
	batchCount [2]int
	batchBytes [2]int
	batchDelay [2]time.Duration
	timeout    [2]time.Duration
}{
	batchCount: [2]int{1, 1000},
	batchBytes: [2]int{1 << 10, maxRequestBytes},
	batchDelay: [2]time.Duration{0, 10 * time.Second},
	timeout:    [2]time.Duration{time.Second, 30 * time.Minute},
}

func (c *psConfig) SetDefaults() {
	c.Settings.SetDefaults()
	if c.BatchCount == 0 {
		c.BatchCount = defaultBatchCount
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = defaultBatchBytes
	}
	if c.BatchDelay == 0 {
		c.BatchDelay = config.Duration(defaultBatchDelay)
	}
	if c.Timeout == 0 {
		c.Timeout = config.Duration(defaultTimeout)
	}
}

// Validate checks every field and names the first bad one.
func (c *psConfig) Validate() error {
	switch {
	case c.Project == "":
		return errors.New("project: empty (the Google Cloud project ID of the topic, e.g. my-project)")
	case strings.ContainsAny(c.Project, "/ "):
		return fmt.Errorf("project: %q is not a project ID", c.Project)
	case c.Topic == "":
		return errors.New(`topic: empty (a topic ID, e.g. outbox or "outbox.{type}")`)
	case strings.HasPrefix(c.Topic, "projects/"):
		return fmt.Errorf("topic: %q: give the topic ID; the project comes from project", c.Topic)
	}
	if _, err := parseTopic(c.Topic); err != nil {
		return err
	}
	for field, hp := range map[string]string{"endpoint": c.Endpoint, "emulator_host": c.EmulatorHost} {
		if hp == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(hp); err != nil || strings.Contains(hp, "/") {
			return fmt.Errorf("%s: %q is not host:port (e.g. localhost:8085)", field, hp)
		}
	}
	if c.Endpoint != "" && c.EmulatorHost != "" {
		return errors.New("endpoint, emulator_host: both are set (emulator_host is the endpoint of an emulator)")
	}
	if n := c.BatchCount; n < limits.batchCount[0] || n > limits.batchCount[1] {
		return fmt.Errorf("batch_count: %d is outside %d..%d", n, limits.batchCount[0], limits.batchCount[1])
	}
	if n := c.BatchBytes; n < limits.batchBytes[0] || n > limits.batchBytes[1] {
		return fmt.Errorf("batch_bytes: %d is outside %d..%d", n, limits.batchBytes[0], limits.batchBytes[1])
	}
	if d := c.BatchDelay.D(); d < limits.batchDelay[0] || d > limits.batchDelay[1] {
		return fmt.Errorf("batch_delay: %s is outside %s..%s", d, limits.batchDelay[0], limits.batchDelay[1])
	}
	if t := c.Timeout.D(); t < limits.timeout[0] || t > limits.timeout[1] {
		return fmt.Errorf("timeout: %s is outside %s..%s", t, limits.timeout[0], limits.timeout[1])
	}
	return c.Settings.Validate()
}
