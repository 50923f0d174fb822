package rabbitmq

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/walpost/walpost/internal/publish/nametmpl"
)

// maxShortStr is the longest AMQP 0-9-1 short string, which exchange
// names and routing keys are: 255 bytes.
const maxShortStr = 255

var (
	// errIllegalExchange is wrapped by every exchange name error.
	errIllegalExchange = errors.New("rabbitmq: illegal exchange name")
	// errIllegalRoutingKey is wrapped by every routing key error.
	errIllegalRoutingKey = errors.New("rabbitmq: illegal routing key")
)

// legalExchangeChar reports whether AMQP 0-9-1 allows c in an exchange
// name: letters, digits, '-', '_', '.' and ':'.
func legalExchangeChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':'
}

// exchangeRules are AMQP 0-9-1's rules for exchange names.
var exchangeRules = nametmpl.Rules{
	Broker: "RabbitMQ", MaxLen: maxShortStr, LegalChar: legalExchangeChar,
	Allowed: "a-z, A-Z, 0-9, '-', '_', '.' and ':'", Illegal: errIllegalExchange,
}

// legalRoutingKeyByte allows every byte but control characters: a routing
// key is any short string, and the message type and key are UTF-8.
func legalRoutingKeyByte(c byte) bool { return c >= 0x20 && c != 0x7f }

// routingKeyRules: 1 to 255 bytes of valid UTF-8 without control
// characters.
var routingKeyRules = nametmpl.Rules{
	Broker: "AMQP", MaxLen: maxShortStr, LegalChar: legalRoutingKeyByte,
	Allowed: "printable UTF-8", Illegal: errIllegalRoutingKey,
	Extra: func(name string) error {
		if !utf8.ValidString(name) {
			return fmt.Errorf("%w: not valid UTF-8", errIllegalRoutingKey)
		}
		return nil
	},
}

type exchangeTemplate = nametmpl.Template

// fixedName reports whether t is a fixed name, without a placeholder:
// every message gets the same name. (A '{' in a parsed template always
// starts a placeholder.)
func fixedName(t *nametmpl.Template) bool { return !strings.Contains(t.Text(), "{") }

// parseExchange parses and checks the exchange template; errors start
// with "exchange: ".
func parseExchange(text string) (*exchangeTemplate, error) {
	return nametmpl.Parse("exchange", text, exchangeRules)
}

// parseRoutingKey parses and checks the routing key template; errors start
// with "routing_key: ".
func parseRoutingKey(text string) (*nametmpl.Template, error) {
	return nametmpl.Parse("routing_key", text, routingKeyRules)
}
