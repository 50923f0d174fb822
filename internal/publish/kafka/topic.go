package kafka

import (
	"errors"
	"fmt"
	"strings"

	"github.com/walpost/walpost/internal/publish/nametmpl"
)

// maxTopicLen is the longest topic name Kafka accepts.
const maxTopicLen = 249

// legalTopicChar reports whether Kafka accepts c in a topic name.
func legalTopicChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// errIllegalTopic is wrapped by every topic name error, so that tests and
// callers can tell it apart.
var errIllegalTopic = errors.New("kafka: illegal topic name")

// reservedTopic refuses the names Kafka reserves.
func reservedTopic(name string) error {
	if name == "." || name == ".." {
		return fmt.Errorf("%w: %q is reserved", errIllegalTopic, name)
	}
	return nil
}

// internalTopic refuses, in a name a message's type or key chose, the
// "__" prefix of Kafka's internal topics (__consumer_offsets,
// __transaction_state) and of other tools' (__confluent…, Connect's).
func internalTopic(name string) error {
	if strings.HasPrefix(name, "__") {
		return fmt.Errorf("%w: %q starts with \"__\", the prefix of Kafka's internal topics (__consumer_offsets, __transaction_state)", errIllegalTopic, name)
	}
	return nil
}

// topicRules are Kafka's rules for topic names: 1 to 249 characters of
// [a-zA-Z0-9._-], and neither "." nor "..". An expanded name may not start
// with "__" unless the template's leading text does.
var topicRules = nametmpl.Rules{
	Broker: "Kafka", MaxLen: maxTopicLen, LegalChar: legalTopicChar,
	Allowed: "a-z, A-Z, 0-9, '.', '_' and '-'", Illegal: errIllegalTopic, Extra: reservedTopic,
	Reserved: internalTopic,
}

// topicTemplate expands "outbox.{type}" into a topic per message.
type topicTemplate = nametmpl.Template

// parseTopic parses and checks a topic template. Errors start with the
// field, "topic: ...".
func parseTopic(text string) (*topicTemplate, error) {
	return nametmpl.Parse("topic", text, topicRules)
}
