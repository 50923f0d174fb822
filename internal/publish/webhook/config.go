package webhook

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/publish/tlsconf"
)

// The modes.
const (
	// ModeMessage sends one request per message, its payload as the body.
	ModeMessage = "message"
	// ModeBatch sends one request per batch, a JSON array of the file
	// sink's objects as the body.
	ModeBatch = "batch"
)

// webhookConfig holds a webhook sink's own settings: the keys of its YAML
// mapping besides name, kind and route (see the package doc and
// docs/sinks/webhook.md).
type webhookConfig struct {
	// Settings are format (raw or cloudevents) and source.
	envelope.Settings `yaml:",inline"`
	// URL is the endpoint, http or https; required. A user and password
	// in it are sent as HTTP Basic authentication. It is never logged or
	// put in an error: its path and query may hold a token.
	URL string `yaml:"url"`
	// Mode is message (default: one request per message) or batch.
	Mode string `yaml:"mode"`
	// Headers are extra headers sent with every request, e.g.
	// Authorization. Their values are treated as secrets.
	Headers map[string]string `yaml:"headers"`
	// Secret, when set, signs every request (inbox.SignatureHeader),
	// with scheme v2 (inbox.SignRequest).
	Secret string `yaml:"secret"`
	// SignatureV1 adds the old scheme's v1 signature beside v2 (default
	// true), for receivers not yet upgraded to v2 during the transition
	// (docs/security.md); set it to false once every receiver verifies
	// v2. Receivers that verify v2 ignore v1 beside it.
	SignatureV1 *bool `yaml:"signature_v1"`
	// Timeout bounds one request: connecting, TLS, sending the body and
	// reading the answer (default 10s).
	Timeout config.Duration `yaml:"timeout"`
	// MaxRetryAfter caps how long the sink waits when a 429 or 503 answer
	// carries Retry-After (default 30s; 0s ignores Retry-After).
	MaxRetryAfter *config.Duration `yaml:"max_retry_after"`
	// BatchSize is the most messages in one request of mode batch
	// (default 100).
	BatchSize int `yaml:"batch_size"`
	// BatchBytes is the most body bytes of one request of mode batch
	// (default 1048576, inbox.DefaultMaxBodyBytes); a message larger
	// than that goes alone.
	BatchBytes int `yaml:"batch_bytes"`
	// Concurrency is how many requests may be in flight at once (default
	// 1: one at a time, in WAL order). Above 1 the messages of one
	// ordering key (message.Message.OrderingKey: the key, or the id for a
	// NULL key) still go one request at a time, in WAL order, and
	// requests of different keys go out at once (see lanes.go).
	Concurrency *int `yaml:"concurrency"`
	// TLS configures https; it is refused with an http URL.
	TLS tlsconf.Settings `yaml:"tls"`
}

const (
	defaultTimeout       = 10 * time.Second
	defaultMaxRetryAfter = 30 * time.Second
	defaultBatchSize     = 100
	defaultBatchBytes    = 1 << 20
	defaultConcurrency   = 1
)

// limits is the table of allowed ranges, checked by Validate.
var limits = struct {
	timeout       [2]time.Duration
	maxRetryAfter [2]time.Duration
	batchSize     [2]int
	batchBytes    [2]int
	concurrency   [2]int
}{
	timeout:       [2]time.Duration{100 * time.Millisecond, 10 * time.Minute},
	maxRetryAfter: [2]time.Duration{0, time.Hour},
	batchSize:     [2]int{1, 10_000},
	batchBytes:    [2]int{1 << 10, 1 << 30},
	concurrency:   [2]int{1, 256},
}

func (c *webhookConfig) SetDefaults() {
	c.Settings.SetDefaults()
	if c.Mode == "" {
		c.Mode = ModeMessage
	}
	if c.Timeout == 0 {
		c.Timeout = config.Duration(defaultTimeout)
	}
	if c.MaxRetryAfter == nil {
		d := config.Duration(defaultMaxRetryAfter)
		c.MaxRetryAfter = &d
	}
	if c.BatchSize == 0 {
		c.BatchSize = defaultBatchSize
	}
	if c.SignatureV1 == nil {
		v1 := true
		c.SignatureV1 = &v1
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = defaultBatchBytes
	}
	if c.Concurrency == nil {
		n := defaultConcurrency
		c.Concurrency = &n
	}
}

// Validate checks every field and names the first bad one, starting at
// the field ("url: empty"); the registry prefixes the sink. No error
// repeats the URL, the secret or a header's value.
func (c *webhookConfig) Validate() error {
	if err := c.Settings.Validate(); err != nil {
		return err
	}
	u, err := parseURL(c.URL)
	if err != nil {
		return err
	}
	switch c.Mode {
	case ModeMessage:
	case ModeBatch:
		if c.IsCloudEvents() {
			return errors.New("mode: batch cannot be used with format: cloudevents " +
				"(the sink sends CloudEvents in binary mode, one event per request); use mode: message")
		}
	default:
		return fmt.Errorf("mode: %q is not message or batch", c.Mode)
	}
	if err := checkHeaders(c.Headers); err != nil {
		return err
	}
	if t := c.Timeout.D(); t < limits.timeout[0] || t > limits.timeout[1] {
		return fmt.Errorf("timeout: %s is outside %s..%s", t, limits.timeout[0], limits.timeout[1])
	}
	if r := c.MaxRetryAfter.D(); r < limits.maxRetryAfter[0] || r > limits.maxRetryAfter[1] {
		return fmt.Errorf("max_retry_after: %s is outside %s..%s", r, limits.maxRetryAfter[0], limits.maxRetryAfter[1])
	}
	if c.BatchSize < limits.batchSize[0] || c.BatchSize > limits.batchSize[1] {
		return fmt.Errorf("batch_size: %d is outside %d..%d", c.BatchSize, limits.batchSize[0], limits.batchSize[1])
	}
	if c.BatchBytes < limits.batchBytes[0] || c.BatchBytes > limits.batchBytes[1] {
		return fmt.Errorf("batch_bytes: %d is outside %d..%d", c.BatchBytes, limits.batchBytes[0], limits.batchBytes[1])
	}
	if n := *c.Concurrency; n < limits.concurrency[0] || n > limits.concurrency[1] {
		return fmt.Errorf("concurrency: %d is outside %d..%d (the most requests in flight at once; 1 sends one at a time)",
			n, limits.concurrency[0], limits.concurrency[1])
	}
	return c.TLS.Validate(u.Scheme == "https", "url is not https")
}

// parseURL checks the endpoint. Its errors never repeat it: a webhook
// URL's path or query often is the credential.
func parseURL(s string) (*url.URL, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("url: empty (e.g. https://hooks.example.com/walpost)")
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, errors.New("url: not a URL (the value is not repeated here: it may hold a credential)")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, errors.New("url: the scheme is not http or https")
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, errors.New("url: no host")
	}
	if u.Fragment != "" {
		return nil, errors.New("url: has a #fragment, which is never sent; remove it")
	}
	// The URL is fixed: no message chooses where it goes (docs/security.md).
	// A placeholder the operator may have meant as a template is refused
	// rather than sent as it stands.
	low := strings.ToLower(s)
	for _, p := range []string{"{type}", "{key}", "%7btype%7d", "%7bkey%7d"} {
		if strings.Contains(low, p) {
			return nil, errors.New("url: holds {type} or {key}, but the webhook URL is not a template: every message goes to the one URL " +
				"(its type and key travel in the request's headers and body); remove the placeholder")
		}
	}
	return u, nil
}

// reserved are the request headers the sink sets itself (or that belong
// to the connection), which neither headers: nor the outbox headers
// column may set. Keys are canonical (http.CanonicalHeaderKey).
var reserved = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Content-Encoding": true, "Transfer-Encoding": true,
	"Host": true, "Connection": true, "Keep-Alive": true, "Te": true, "Trailer": true, "Upgrade": true,
	"Expect": true, "Proxy-Connection": true, "Proxy-Authorization": true,
	headerIdempotencyKey: true, headerID: true, headerType: true, headerKey: true, headerCount: true,
	headerSignature: true,
}

// isReserved reports whether the canonical header name k is one the sink
// sets or the transport owns; every ce- header is the envelope's.
func isReserved(k string) bool {
	return reserved[k] || strings.HasPrefix(k, "Ce-")
}

// checkHeaders validates headers:, naming the header but never its value.
func checkHeaders(h map[string]string) error {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	seen := map[string]string{}
	for _, k := range names {
		if !validName(k) {
			return fmt.Errorf("headers: %q is not a header name (letters, digits and !#$%%&'*+-.^_`|~)", k)
		}
		ck := http.CanonicalHeaderKey(k)
		if isReserved(ck) {
			return fmt.Errorf("headers.%s: set by the sink itself, cannot be configured", k)
		}
		if other, dup := seen[ck]; dup {
			return fmt.Errorf("headers.%s: the same header as headers.%s (names are case-insensitive)", k, other)
		}
		seen[ck] = k
		if h[k] == "" {
			return fmt.Errorf("headers.%s: empty value", k)
		}
		if !validValue(h[k]) {
			return fmt.Errorf("headers.%s: the value holds a control character (the value is not repeated here)", k)
		}
	}
	return nil
}

// validName reports whether s is an HTTP header name (an RFC 9110 token).
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validValue reports whether s may be sent as a header value: no control
// character but tab (RFC 9110 field-value; bytes over 0x7f pass as
// obs-text, as UTF-8 does).
func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
