package kafka

import (
	"errors"
	"fmt"

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

// topicRules are Kafka's rules for topic names: 1 to 249 characters of
// [a-zA-Z0-9._-], and neither "." nor "..".
var topicRules = nametmpl.Rules{
	Broker: "Kafka", MaxLen: maxTopicLen, LegalChar: legalTopicChar,
	Allowed: "a-z, A-Z, 0-9, '.', '_' and '-'", Illegal: errIllegalTopic, Extra: reservedTopic,
}

// topicTemplate expands "outbox.{type}" into a topic per message.
type topicTemplate = nametmpl.Template

// parseTopic parses and checks a topic template. Errors start with the
// field, "topic: ...".
func parseTopic(text string) (*topicTemplate, error) {
	return nametmpl.Parse("topic", text, topicRules)
}
