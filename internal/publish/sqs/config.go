package sqs

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/redact"
)

// sqsConfig holds an sqs sink's own settings: the keys of its YAML
// mapping besides name, kind and route (see the package doc).
type sqsConfig struct {
	// Settings are format (raw or cloudevents) and source, the keys every
	// sink has (docs/design.md, "Formats").
	envelope.Settings `yaml:",inline"`

	// Queue is where messages go: a queue name, which may be a template
	// with {type} and {key} and is resolved to its URL with GetQueueUrl,
	// or a queue URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME),
	// used as it is. A name (or URL) ending in ".fifo" is a FIFO queue.
	Queue string `yaml:"queue"`
	// Region is the AWS region (eu-central-1); empty takes it from the
	// default chain (AWS_REGION, the shared config file's profile).
	Region string `yaml:"region"`
	// Endpoint overrides the SQS endpoint URL: a VPC endpoint, LocalStack,
	// the tests' stand-in. Empty uses the region's endpoint.
	Endpoint string `yaml:"endpoint"`

	// MaxMessageBytes is the largest message and the largest batch, in
	// bytes, as SQS counts them (body plus attribute names, types and
	// values): 262144 (256 KiB, the default and every queue's limit
	// unless its MaximumMessageSize was raised) up to 1048576.
	MaxMessageBytes int `yaml:"max_message_bytes"`

	// MaxRetries is how often the SDK retries a failed request itself
	// before Publish returns the error (default 3; 0 turns its retries
	// off). The relay retries the batch after that, forever.
	MaxRetries *int `yaml:"max_retries"`

	// Timeout bounds one Publish call, the SDK's retries included
	// (default 1m). When it passes, Publish fails with a retryable error.
	Timeout config.Duration `yaml:"timeout"`
}

const (
	defaultMaxMessageBytes = 256 << 10
	defaultMaxRetries      = 3
	defaultTimeout         = time.Minute
)

// limits is the table of allowed ranges, checked by Validate.
var limits = struct {
	maxMessageBytes [2]int
	maxRetries      [2]int
	timeout         [2]time.Duration
}{
	maxMessageBytes: [2]int{1 << 10, 1 << 20},
	maxRetries:      [2]int{0, 20},
	timeout:         [2]time.Duration{time.Second, 30 * time.Minute},
}

func (c *sqsConfig) SetDefaults() {
	c.Settings.SetDefaults()
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = defaultMaxMessageBytes
	}
	if c.MaxRetries == nil {
		n := defaultMaxRetries
		c.MaxRetries = &n
	}
	if c.Timeout == 0 {
		c.Timeout = config.Duration(defaultTimeout)
	}
}

// isURL reports whether the queue setting is a URL rather than a name.
func isURL(queue string) bool { return strings.Contains(queue, "://") }

// Validate checks every field and names the first bad one, starting at the
// field ("queue: empty"); the registry prefixes the sink.
func (c *sqsConfig) Validate() error {
	if c.Queue == "" {
		return errors.New(`queue: empty (set a queue name, e.g. orders.fifo or "outbox-{type}", or its URL)`)
	}
	if isURL(c.Queue) {
		if err := checkQueueURL(c.Queue); err != nil {
			return err
		}
	} else if _, err := parseQueue(c.Queue); err != nil {
		return err
	}
	if c.Region != "" && strings.ContainsAny(c.Region, " /:") {
		return fmt.Errorf("region: %q is not a region (e.g. eu-central-1)", c.Region)
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("endpoint: %q is not an http or https URL (e.g. https://vpce-….sqs.eu-central-1.vpce.amazonaws.com)", redact.URL(c.Endpoint))
		}
		if u.User != nil {
			return fmt.Errorf("endpoint: %q holds credentials; the sink takes them from the default AWS chain (environment, shared files, IAM role)", redact.URL(c.Endpoint))
		}
	}
	if n := c.MaxMessageBytes; n < limits.maxMessageBytes[0] || n > limits.maxMessageBytes[1] {
		return fmt.Errorf("max_message_bytes: %d is outside %d..%d", n, limits.maxMessageBytes[0], limits.maxMessageBytes[1])
	}
	if n := *c.MaxRetries; n < limits.maxRetries[0] || n > limits.maxRetries[1] {
		return fmt.Errorf("max_retries: %d is outside %d..%d", n, limits.maxRetries[0], limits.maxRetries[1])
	}
	if t := c.Timeout.D(); t < limits.timeout[0] || t > limits.timeout[1] {
		return fmt.Errorf("timeout: %s is outside %s..%s", t, limits.timeout[0], limits.timeout[1])
	}
	return c.Settings.Validate()
}

// checkQueueURL checks a queue given as a URL: http or https, a host, a
// path that ends in a legal queue name, and no template (a URL names one
// queue).
func checkQueueURL(s string) error {
	if strings.ContainsAny(s, "{}") {
		return fmt.Errorf("queue: %q: a queue URL cannot be a template; template a queue name instead (queue: \"outbox-{type}\")", redact.URL(s))
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("queue: %q is neither a queue name nor an http(s) queue URL", redact.URL(s))
	}
	if u.User != nil {
		return fmt.Errorf("queue: %q holds credentials; the sink takes them from the default AWS chain", redact.URL(s))
	}
	name := u.Path[strings.LastIndexByte(u.Path, '/')+1:]
	if err := queueRules.Check(name); err != nil {
		return fmt.Errorf("queue: URL %q does not end in a queue name: %w", s, err)
	}
	return nil
}
