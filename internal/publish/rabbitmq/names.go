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

// amqExchange refuses, in a name a message's type or key chose, the amq.
// namespace: RabbitMQ's own exchanges (amq.topic, amq.direct,
// amq.rabbitmq.trace, …), which a message must not reach and which cannot
// be declared.
func amqExchange(name string) error {
	if strings.HasPrefix(name, "amq.") {
		return fmt.Errorf("%w: %q is in the amq. namespace, which RabbitMQ keeps for its own exchanges", errIllegalExchange, name)
	}
	return nil
}

// exchangeRules are AMQP 0-9-1's rules for exchange names; an expanded
// name may not start with amq. unless the template's leading text does.
var exchangeRules = nametmpl.Rules{
	Broker: "RabbitMQ", MaxLen: maxShortStr, LegalChar: legalExchangeChar,
	Allowed: "a-z, A-Z, 0-9, '-', '_', '.' and ':'", Illegal: errIllegalExchange,
	Reserved: amqExchange,
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

// nameSet is the declare_exchanges list: exchange names, and prefixes
// written with a trailing '*' ("outbox.*"). The zero value allows nothing.
type nameSet struct {
	names    map[string]bool
	prefixes []string
}

// allows reports whether name is in the set.
func (n nameSet) allows(name string) bool {
	if n.names[name] {
		return true
	}
	for _, p := range n.prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// declarable is the set of templated exchange names declare_exchange may
// declare: the declare_exchanges list when set, else every name that
// starts with the template's leading text ("outbox.{type}" → "outbox.*"),
// and nothing for a template that starts with a placeholder.
func declarable(list []string, t *exchangeTemplate) nameSet {
	n := nameSet{names: map[string]bool{}}
	if list == nil {
		if lead, _, _ := strings.Cut(t.Text(), "{"); lead != "" {
			n.prefixes = append(n.prefixes, lead)
		}
		return n
	}
	for _, e := range list {
		if p, ok := strings.CutSuffix(e, "*"); ok {
			n.prefixes = append(n.prefixes, p)
		} else {
			n.names[e] = true
		}
	}
	return n
}

// checkDeclarable checks a declare_exchanges entry: a legal exchange name,
// or a prefix of one followed by '*', outside the amq. namespace. Errors
// start with the field.
func checkDeclarable(i int, e string) error {
	name, _ := strings.CutSuffix(e, "*")
	switch {
	case e == "":
		return fmt.Errorf("declare_exchanges[%d]: empty", i)
	case name == "":
		return fmt.Errorf(`declare_exchanges[%d]: "*" would let any message's type create any exchange: list the names, or prefixes such as "outbox.*"`, i)
	}
	if err := exchangeRules.Check(name); err != nil {
		return fmt.Errorf("declare_exchanges[%d]: %q: %w ('*' only at the end, for a prefix)", i, e, err)
	}
	if err := amqExchange(name); err != nil {
		return fmt.Errorf("declare_exchanges[%d]: %q: RabbitMQ keeps the amq. namespace for its own exchanges; they cannot be declared", i, e)
	}
	return nil
}
