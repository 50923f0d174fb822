package sns

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

// snsConfig holds an sns sink's own settings (see the package doc).
type snsConfig struct {
	envelope.Settings `yaml:",inline"`

	// TopicARN is the topic's ARN (arn:aws:sns:REGION:ACCOUNT:NAME); its
	// NAME may be a template with {type} and {key}. A name ending in
	// ".fifo" is a FIFO topic.
	TopicARN string `yaml:"topic_arn"`
	// Region is the AWS region; empty takes the ARN's.
	Region string `yaml:"region"`
	// Endpoint overrides the SNS endpoint URL (a VPC endpoint, LocalStack,
	// the tests' stand-in).
	Endpoint string `yaml:"endpoint"`
	// MaxMessageBytes is the largest message and batch as SNS counts them
	// (256 KiB).
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// MaxRetries is how often the SDK retries a request itself (default 3).
	MaxRetries *int `yaml:"max_retries"`
	// Timeout bounds one Publish call (default 1m).
	Timeout config.Duration `yaml:"timeout"`
}

const (
	defaultMaxMessageBytes = 256 << 10
	defaultMaxRetries      = 3
	defaultTimeout         = time.Minute
)

func (c *snsConfig) SetDefaults() {
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

// splitARN returns the ARN's prefix up to and including its last ':'
// and the name after it, and the ARN's region.
func splitARN(arn string) (prefix, name, region string, err error) {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || !strings.HasPrefix(parts[1], "aws") || parts[2] != "sns" || parts[3] == "" || parts[4] == "" || parts[5] == "" {
		return "", "", "", fmt.Errorf("topic_arn: %q is not an SNS topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)", arn)
	}
	i := strings.LastIndexByte(arn, ':')
	return arn[:i+1], arn[i+1:], parts[3], nil
}

// Validate checks every field and names the first bad one.
func (c *snsConfig) Validate() error {
	if c.TopicARN == "" {
		return errors.New(`topic_arn: empty (e.g. arn:aws:sns:eu-central-1:123456789012:outbox.fifo, or a template: "…:outbox-{type}")`)
	}
	prefix, name, _, err := splitARN(c.TopicARN)
	if err != nil {
		return err
	}
	if strings.ContainsAny(prefix, "{}") {
		return fmt.Errorf("topic_arn: %q: only the topic name may be a template", c.TopicARN)
	}
	if _, err := parseTopic(name); err != nil {
		return err
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return fmt.Errorf("endpoint: %q is not an http or https URL without credentials", redact.URL(c.Endpoint))
		}
	}
	if n := c.MaxMessageBytes; n < 1<<10 || n > 256<<10 {
		return fmt.Errorf("max_message_bytes: %d is outside %d..%d", n, 1<<10, 256<<10)
	}
	if n := *c.MaxRetries; n < 0 || n > 20 {
		return fmt.Errorf("max_retries: %d is outside 0..20", n)
	}
	if t := c.Timeout.D(); t < time.Second || t > 30*time.Minute {
		return fmt.Errorf("timeout: %s is outside 1s..30m", t)
	}
	return c.Settings.Validate()
}
