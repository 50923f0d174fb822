package servicebus

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/publish/envelope"
)

// sbConfig holds a servicebus sink's own settings: the keys of its YAML
// mapping besides name, kind and route (see the package doc).
type sbConfig struct {
	// Settings are format (raw or cloudevents) and source, the keys every
	// sink has (docs/design.md, "Formats").
	envelope.Settings `yaml:",inline"`

	// ConnectionString authenticates with a shared access key or
	// signature ("Endpoint=sb://…;SharedAccessKeyName=…;SharedAccessKey=…").
	// Exactly one of ConnectionString and Namespace is set.
	ConnectionString string `yaml:"connection_string"`
	// Namespace is the fully qualified namespace
	// (walpost.servicebus.windows.net); the sink then authenticates with
	// Azure AD through azidentity's DefaultAzureCredential.
	Namespace string `yaml:"namespace"`

	// Queue, Topic and Entity name where messages go; exactly one is set.
	// Each may be a template with {type} and {key}. Queue and Topic only
	// document what the entity is (a sender does not care); Entity is the
	// neutral spelling for templates that name both.
	Queue  string `yaml:"queue"`
	Topic  string `yaml:"topic"`
	Entity string `yaml:"entity"`

	// Sessions sets every message's SessionId to its ordering key (the
	// key, or the id when the key is NULL). Session-enabled entities need
	// it; the others ignore SessionId.
	Sessions bool `yaml:"sessions"`

	// MaxRetries is how often the SDK retries a failed operation itself
	// before Publish returns the error (default 3; 0 turns its retries
	// off). The relay retries the whole batch after that, forever.
	MaxRetries *int `yaml:"max_retries"`
	// RetryDelay is the SDK's first wait between retries (default 500ms);
	// it grows exponentially up to MaxRetryDelay (default 10s).
	RetryDelay    *config.Duration `yaml:"retry_delay"`
	MaxRetryDelay *config.Duration `yaml:"max_retry_delay"`

	// MaxBatchBytes caps the bytes of one batch. 0 (the default) uses what
	// the entity advertises (256 KiB on Standard, 1 MiB on Premium). A
	// value above the entity's limit makes the service reject full batches.
	MaxBatchBytes int64 `yaml:"max_batch_bytes"`

	// MaxMessageBytes is the entity's largest message: 262144 (256 KiB,
	// Standard; the default) up to 104857600 (100 MiB, Premium's largest
	// setting). The sink does not enforce it (the entity does); a claim
	// check (relay.claim_check) takes it for its threshold.
	MaxMessageBytes int `yaml:"max_message_bytes"`

	// Timeout bounds one Publish call: connecting, authenticating and
	// sending every batch of it, the SDK's own retries included (default
	// 1m). When it passes, Publish fails with a retryable error.
	Timeout config.Duration `yaml:"timeout"`
}

const (
	defaultMaxRetries    = 3
	defaultRetryDelay    = 500 * time.Millisecond
	defaultMaxRetryDelay = 10 * time.Second
	defaultTimeout       = time.Minute
	// defaultMaxMessageBytes is Service Bus Standard's message limit.
	defaultMaxMessageBytes = 256 << 10
)

// limits is the table of allowed ranges, checked by validate.
var limits = struct {
	maxRetries    [2]int
	retryDelay    [2]time.Duration
	maxRetryDelay [2]time.Duration
	maxBatchBytes [2]int64
	maxMsgBytes   [2]int
	timeout       [2]time.Duration
}{
	maxRetries:    [2]int{0, 20},
	retryDelay:    [2]time.Duration{time.Millisecond, time.Minute},
	maxRetryDelay: [2]time.Duration{time.Millisecond, 10 * time.Minute},
	maxBatchBytes: [2]int64{1 << 10, 256 << 20},
	maxMsgBytes:   [2]int{1 << 10, 100 << 20},
	timeout:       [2]time.Duration{time.Second, 30 * time.Minute},
}

func (c *sbConfig) SetDefaults() {
	c.Settings.SetDefaults()
	if c.MaxRetries == nil {
		n := defaultMaxRetries
		c.MaxRetries = &n
	}
	if c.RetryDelay == nil {
		d := config.Duration(defaultRetryDelay)
		c.RetryDelay = &d
	}
	if c.MaxRetryDelay == nil {
		d := config.Duration(max(defaultMaxRetryDelay, c.RetryDelay.D()))
		c.MaxRetryDelay = &d
	}
	if c.Timeout == 0 {
		c.Timeout = config.Duration(defaultTimeout)
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = defaultMaxMessageBytes
	}
}

// entityField returns the name of the entity field that is set and its
// value; validate has checked that exactly one is.
func (c *sbConfig) entityField() (field, value string) {
	switch {
	case c.Queue != "":
		return "queue", c.Queue
	case c.Topic != "":
		return "topic", c.Topic
	}
	return "entity", c.Entity
}

// Validate checks every field and names the first bad one, starting at the
// field ("queue: empty"); the registry prefixes the sink.
func (c *sbConfig) Validate() error {
	switch {
	case c.ConnectionString == "" && c.Namespace == "":
		return errors.New("connection_string, namespace: neither is set (set connection_string to use a shared access key, " +
			"or namespace, e.g. walpost.servicebus.windows.net, to use Azure AD)")
	case c.ConnectionString != "" && c.Namespace != "":
		return errors.New("connection_string, namespace: both are set (set one: the connection string names its namespace)")
	case c.ConnectionString != "":
		if err := checkConnectionString(c.ConnectionString); err != nil {
			return err
		}
	default:
		if err := checkNamespace(c.Namespace); err != nil {
			return err
		}
	}

	set := 0
	for _, v := range []string{c.Queue, c.Topic, c.Entity} {
		if v != "" {
			set++
		}
	}
	if set == 0 {
		return errors.New(`queue, topic, entity: none is set (set one, e.g. queue: orders, or entity: "outbox.{type}")`)
	}
	if set > 1 {
		return errors.New("queue, topic, entity: more than one is set (set one)")
	}
	field, value := c.entityField()
	if _, err := parseEntity(field, value); err != nil {
		return err
	}

	if n := *c.MaxRetries; n < limits.maxRetries[0] || n > limits.maxRetries[1] {
		return fmt.Errorf("max_retries: %d is outside %d..%d", n, limits.maxRetries[0], limits.maxRetries[1])
	}
	if d := c.RetryDelay.D(); d < limits.retryDelay[0] || d > limits.retryDelay[1] {
		return fmt.Errorf("retry_delay: %s is outside %s..%s", d, limits.retryDelay[0], limits.retryDelay[1])
	}
	if d := c.MaxRetryDelay.D(); d < limits.maxRetryDelay[0] || d > limits.maxRetryDelay[1] {
		return fmt.Errorf("max_retry_delay: %s is outside %s..%s", d, limits.maxRetryDelay[0], limits.maxRetryDelay[1])
	}
	if c.MaxRetryDelay.D() < c.RetryDelay.D() {
		return fmt.Errorf("max_retry_delay: %s is below retry_delay %s", c.MaxRetryDelay.D(), c.RetryDelay.D())
	}
	if b := c.MaxBatchBytes; b != 0 && (b < limits.maxBatchBytes[0] || b > limits.maxBatchBytes[1]) {
		return fmt.Errorf("max_batch_bytes: %d is outside %d..%d (or 0 for the entity's own limit)", b, limits.maxBatchBytes[0], limits.maxBatchBytes[1])
	}
	if n := c.MaxMessageBytes; n < limits.maxMsgBytes[0] || n > limits.maxMsgBytes[1] {
		return fmt.Errorf("max_message_bytes: %d is outside %d..%d", n, limits.maxMsgBytes[0], limits.maxMsgBytes[1])
	}
	if t := c.Timeout.D(); t < limits.timeout[0] || t > limits.timeout[1] {
		return fmt.Errorf("timeout: %s is outside %s..%s", t, limits.timeout[0], limits.timeout[1])
	}
	return c.Settings.Validate()
}

// retryOptions maps the retry settings to the SDK's.
func (c *sbConfig) retryOptions() azservicebus.RetryOptions {
	n := int32(*c.MaxRetries)
	if n == 0 {
		n = -1 // the SDK reads 0 as its default of 3, and a negative value as none
	}
	return azservicebus.RetryOptions{MaxRetries: n, RetryDelay: c.RetryDelay.D(), MaxRetryDelay: c.MaxRetryDelay.D()}
}

// checkConnectionString checks the form of a connection string without
// repeating it or any part of it that could hold the key: key=value pairs
// separated by ';' with no spaces around keys and values (the SDK trims
// none), an Endpoint with the sb:// scheme, and a key name with a key or
// a shared access signature. A string written with ',' instead of ';' is
// one pair whose "Endpoint" runs on into the key: it is refused before the
// Endpoint is shown.
func checkConnectionString(cs string) error {
	const pairsHint = "(copy it whole from the portal or `az servicebus namespace authorization-rule keys list`; it is not repeated here because it holds a secret)"
	keys := map[string]string{}
	for _, part := range strings.Split(cs, ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return errors.New("connection_string: not a list of key=value pairs separated by ';' " + pairsHint)
		}
		key := strings.ToLower(strings.TrimSpace(k))
		switch key {
		case "endpoint", "sharedaccesskeyname", "sharedaccesskey", "sharedaccesssignature", "entitypath", "usedevelopmentemulator":
		default:
			continue // the SDK ignores other keys
		}
		if strings.TrimSpace(k) != k || strings.TrimSpace(v) != v {
			return fmt.Errorf("connection_string: spaces around the %s key or its value (remove them: the SDK does not) %s", connStringKeyName[key], pairsHint)
		}
		if _, dup := keys[key]; dup {
			return fmt.Errorf("connection_string: %s is given twice %s", connStringKeyName[key], pairsHint)
		}
		keys[key] = v
	}
	ep := keys["endpoint"]
	switch {
	case ep == "":
		return errors.New("connection_string: no Endpoint (Endpoint=sb://NAMESPACE.servicebus.windows.net/;…)")
	case strings.ContainsAny(ep, ",= \t"):
		return errors.New("connection_string: the Endpoint value runs on into other pairs (are they separated by ',' instead of ';'?) " + pairsHint)
	case !strings.HasPrefix(strings.ToLower(ep), "sb://"):
		return fmt.Errorf("connection_string: Endpoint %q does not start with sb://", ep)
	case keys["sharedaccesssignature"] == "" && (keys["sharedaccesskeyname"] == "" || keys["sharedaccesskey"] == ""):
		return errors.New("connection_string: needs SharedAccessKeyName and SharedAccessKey, or SharedAccessSignature")
	}
	if v, ok := keys["usedevelopmentemulator"]; ok {
		emulator, err := strconv.ParseBool(v)
		if err != nil {
			// The SDK's own error would quote the value.
			return errors.New("connection_string: UseDevelopmentEmulator is not true or false")
		}
		if emulator && !strings.HasPrefix(ep, "sb://") {
			return errors.New("connection_string: with UseDevelopmentEmulator=true the Endpoint must start with sb:// in lower case")
		}
	}
	return nil
}

// connStringKeyName spells the keys of a connection string for errors.
var connStringKeyName = map[string]string{
	"endpoint": "Endpoint", "sharedaccesskeyname": "SharedAccessKeyName", "sharedaccesskey": "SharedAccessKey",
	"sharedaccesssignature": "SharedAccessSignature", "entitypath": "EntityPath", "usedevelopmentemulator": "UseDevelopmentEmulator",
}

// checkNamespace checks that ns is a bare fully qualified host name.
func checkNamespace(ns string) error {
	switch {
	case strings.Contains(ns, "://"):
		return fmt.Errorf("namespace: %q has a scheme; give the host alone, e.g. walpost.servicebus.windows.net", ns)
	case strings.ContainsAny(ns, "/;= "):
		return fmt.Errorf("namespace: %q is not a host name (e.g. walpost.servicebus.windows.net)", ns)
	case !strings.Contains(ns, "."):
		return fmt.Errorf("namespace: %q is not fully qualified; write %s.servicebus.windows.net", ns, ns)
	}
	return nil
}
