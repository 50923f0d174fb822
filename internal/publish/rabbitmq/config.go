package rabbitmq

import (
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/publish/tlsconf"
	"github.com/walpost/walpost/internal/redact"
)

// rabbitConfig holds a rabbitmq sink's own settings: the keys of its YAML
// mapping besides name, kind and route (see the package doc and
// docs/sinks/rabbitmq.md).
type rabbitConfig struct {
	// URL is amqp://user:password@host:port/vhost or amqps://…; the
	// password may come from ${VAR}. Required.
	URL string `yaml:"url"`
	// Exchange is the exchange name or a template with {type} and {key}.
	// Required.
	Exchange string `yaml:"exchange"`
	// RoutingKey is the routing key or a template (default "{type}").
	RoutingKey string `yaml:"routing_key"`
	// DeclareExchange declares each exchange (durable, of ExchangeType)
	// before its first use; when false (the default) a missing exchange is
	// a Permanent error.
	DeclareExchange bool `yaml:"declare_exchange"`
	// DeclareExchanges lists the exchanges that declare_exchange may
	// declare when the exchange is a template: names, and prefixes
	// written with a trailing '*' ("outbox.*"). Unset, it is the
	// template's leading text as a prefix ("outbox.{type}" → "outbox.*"),
	// and nothing for a template that starts with a placeholder. Any
	// other exchange a message's type or key chooses must exist. See
	// docs/security.md.
	DeclareExchanges []string `yaml:"declare_exchanges"`
	// ExchangeType is the type declared with declare_exchange: topic
	// (default), direct, fanout or headers; or x-delayed-message, the
	// type of the rabbitmq_delayed_message_exchange plugin's exchanges,
	// which hold a message back for its x-delay header: the only way the
	// sink honours columns.deliver_at (the exchange must be of that type
	// whether declared or not).
	ExchangeType string `yaml:"exchange_type"`
	// DelayedType is the routing of an x-delayed-message exchange once
	// the delay is over (its x-delayed-type argument when declared):
	// topic (default), direct, fanout or headers.
	DelayedType string `yaml:"delayed_type"`
	// MaxInFlight is the most messages published and not yet confirmed on
	// the channel (default 1000); 1 waits for each confirm in turn.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxMessageBytes is the largest body the sink sends (default 16 MiB,
	// RabbitMQ 4's max_message_size); a larger message is refused.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// Timeout bounds connecting (TCP, TLS, AMQP handshake, channel, confirm
	// mode, exchange checks) and the wait for each confirm (default 10s).
	Timeout config.Duration `yaml:"timeout"`
	// Heartbeat is the AMQP heartbeat interval (default 10s): a server
	// that stays silent for about two of them counts as gone.
	Heartbeat config.Duration `yaml:"heartbeat"`
	// TLS configures amqps:// connections; TLS is on exactly when the
	// URL's scheme is amqps.
	TLS tlsconf.Settings `yaml:"tls"`

	envelope.Settings `yaml:",inline"`
}

const (
	defaultRoutingKey      = "{type}"
	defaultExchangeType    = "topic"
	defaultMaxInFlight     = 1000
	defaultMaxMessageBytes = 16 << 20
	defaultTimeout         = 10 * time.Second
	defaultHeartbeat       = 10 * time.Second
)

// limits is the table of allowed ranges, checked by Validate.
var limits = struct {
	maxInFlight     [2]int
	maxMessageBytes [2]int
	timeout         [2]time.Duration
	heartbeat       [2]time.Duration
}{
	maxInFlight:     [2]int{1, 65535},
	maxMessageBytes: [2]int{1 << 10, 512 << 20}, // RabbitMQ caps max_message_size at 512 MiB
	timeout:         [2]time.Duration{100 * time.Millisecond, 10 * time.Minute},
	heartbeat:       [2]time.Duration{time.Second, 10 * time.Minute},
}

func (c *rabbitConfig) SetDefaults() {
	if c.RoutingKey == "" {
		c.RoutingKey = defaultRoutingKey
	}
	if c.ExchangeType == "" {
		c.ExchangeType = defaultExchangeType
	}
	if c.ExchangeType == DelayedExchangeType && c.DelayedType == "" {
		c.DelayedType = defaultExchangeType
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = defaultMaxInFlight
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = defaultMaxMessageBytes
	}
	if c.Timeout == 0 {
		c.Timeout = config.Duration(defaultTimeout)
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = config.Duration(defaultHeartbeat)
	}
	c.Settings.SetDefaults()
}

// Validate checks every field and names the first bad one, starting at the
// field ("url: empty"); the registry prefixes the sink.
func (c *rabbitConfig) Validate() error {
	u, err := parseURL(c.URL)
	if err != nil {
		return err
	}
	ex, err := parseExchange(c.Exchange)
	if err != nil {
		return err
	}
	if _, err := parseRoutingKey(c.RoutingKey); err != nil {
		return err
	}
	switch c.ExchangeType {
	case "topic", "direct", "fanout", "headers":
		if c.DelayedType != "" {
			return fmt.Errorf("delayed_type: set, but exchange_type is %s: it is the routing of an x-delayed-message exchange only", c.ExchangeType)
		}
	case DelayedExchangeType:
		switch c.DelayedType {
		case "topic", "direct", "fanout", "headers":
		default:
			return fmt.Errorf("delayed_type: %q is not topic, direct, fanout or headers", c.DelayedType)
		}
	default:
		return fmt.Errorf("exchange_type: %q is not topic, direct, fanout, headers or %s", c.ExchangeType, DelayedExchangeType)
	}
	if c.DeclareExchange && reservedExchange(ex) {
		return fmt.Errorf("exchange: %q starts with amq., which RabbitMQ reserves: it cannot be declared (set declare_exchange: false to publish to it)", c.Exchange)
	}
	if c.DeclareExchanges != nil && !c.DeclareExchange {
		return errors.New("declare_exchanges: set, but declare_exchange is false: set declare_exchange: true, or remove declare_exchanges")
	}
	if c.DeclareExchanges != nil && fixedName(ex) {
		return fmt.Errorf("declare_exchanges: set, but exchange %q is a fixed name, which declare_exchange declares: remove declare_exchanges", c.Exchange)
	}
	for i, e := range c.DeclareExchanges {
		if err := checkDeclarable(i, e); err != nil {
			return err
		}
	}
	if c.MaxInFlight < limits.maxInFlight[0] || c.MaxInFlight > limits.maxInFlight[1] {
		return fmt.Errorf("max_in_flight: %d is outside %d..%d", c.MaxInFlight, limits.maxInFlight[0], limits.maxInFlight[1])
	}
	if c.MaxMessageBytes < limits.maxMessageBytes[0] || c.MaxMessageBytes > limits.maxMessageBytes[1] {
		return fmt.Errorf("max_message_bytes: %d is outside %d..%d", c.MaxMessageBytes, limits.maxMessageBytes[0], limits.maxMessageBytes[1])
	}
	if t := c.Timeout.D(); t < limits.timeout[0] || t > limits.timeout[1] {
		return fmt.Errorf("timeout: %s is outside %s..%s", t, limits.timeout[0], limits.timeout[1])
	}
	if h := c.Heartbeat.D(); h < limits.heartbeat[0] || h > limits.heartbeat[1] {
		return fmt.Errorf("heartbeat: %s is outside %s..%s", h, limits.heartbeat[0], limits.heartbeat[1])
	}
	if err := c.TLS.Validate(u.Scheme == "amqps", "url is amqp:// (use amqps:// for TLS)"); err != nil {
		return err
	}
	return c.Settings.Validate()
}

// DelayedExchangeType is the exchange type of the delayed-message plugin
// (rabbitmq_delayed_message_exchange), and HeaderDelay the header in
// which it reads a message's delay, in milliseconds.
const (
	DelayedExchangeType = "x-delayed-message"
	HeaderDelay         = "x-delay"
)

// checkDeliverAt refuses columns.deliver_at unless the exchange is the
// delayed-message plugin's: RabbitMQ itself cannot hold a message back.
func (c *rabbitConfig) checkDeliverAt() error {
	if c.ExchangeType == DelayedExchangeType {
		return nil
	}
	return fmt.Errorf("exchange_type: columns.deliver_at is mapped, but RabbitMQ holds a message back only in an exchange of the "+
		"delayed-message plugin (rabbitmq_delayed_message_exchange), and exchange_type is %s: enable the plugin on the server and "+
		"set exchange_type: %s (the exchange must be of that type), or remove columns.deliver_at; walpost never sends a message early",
		c.ExchangeType, DelayedExchangeType)
}

// reservedExchange reports whether a fixed exchange name, or a template's
// leading literal, is in the amq. namespace that only RabbitMQ declares.
func reservedExchange(t *exchangeTemplate) bool {
	return strings.HasPrefix(t.Text(), "amq.")
}

// parseURL checks an AMQP URL the way the client reads it. Its errors name
// the field and never hold the password: url.Parse quotes the whole URL
// in its errors, so they are shown redacted.
func parseURL(s string) (amqp.URI, error) {
	if s == "" {
		return amqp.URI{}, errors.New(`url: empty (e.g. "amqp://walpost:${RABBITMQ_PASSWORD}@rabbitmq:5672/")`)
	}
	u, err := amqp.ParseURI(s)
	if err != nil {
		// The client's error is not shown: it quotes pieces of the URL
		// (a password with an unescaped '/' reads as a port), which no
		// redaction of the whole password finds.
		return amqp.URI{}, fmt.Errorf("url: %s is not an AMQP URL: use amqp://user:password@host:port/vhost or amqps://…, "+
			"with a numeric port and '@', ':', '/', '?', '#', '%%' and spaces in the user, password or vhost percent-encoded (%%40 for '@')",
			redact.URL(s))
	}
	if u.Host == "" {
		return amqp.URI{}, fmt.Errorf("url: %s has no host", redact.URL(s))
	}
	return u, nil
}
