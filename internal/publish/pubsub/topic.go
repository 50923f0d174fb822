package pubsub

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/walpost/walpost/internal/publish/nametmpl"
)

// errIllegalTopic is wrapped by every topic name error.
var errIllegalTopic = errors.New("pubsub: illegal topic name")

func legalTopicChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.~+%", c) >= 0
}

// topicShape: 3 to 255 characters, starting with a letter.
func topicShape(name string) error {
	switch {
	case len(name) < 3:
		return fmt.Errorf("%w: shorter than 3 characters", errIllegalTopic)
	case !(name[0] >= 'a' && name[0] <= 'z' || name[0] >= 'A' && name[0] <= 'Z'):
		return fmt.Errorf("%w: it must start with a letter", errIllegalTopic)
	}
	return nil
}

// topicReserved refuses a name in Google's namespace ("goog…").
func topicReserved(name string) error {
	if len(name) >= 4 && strings.EqualFold(name[:4], "goog") {
		return fmt.Errorf("%w: names starting with \"goog\" are Google's", errIllegalTopic)
	}
	return nil
}

// topicValue refuses a '%' in what a type or key brings into a topic
// name: the name is a URL path segment, and a value must not bring
// escapes.
func topicValue(v string) error {
	if i := strings.IndexByte(v, '%'); i >= 0 {
		return fmt.Errorf("%w: '%%' at offset %d: an escape may come only from the template", errIllegalTopic, i)
	}
	return nil
}

var topicRules = nametmpl.Rules{
	Broker: "Pub/Sub", MaxLen: 255, LegalChar: legalTopicChar,
	Allowed: "a-z, A-Z, 0-9, '-', '_', '.', '~', '+' and '%'", Illegal: errIllegalTopic,
	Extra: topicShape, Value: topicValue, Reserved: topicReserved,
}

func parseTopic(text string) (*nametmpl.Template, error) {
	return nametmpl.Parse("topic", text, topicRules)
}

// maxOrderingKeyLen is the longest ordering key Pub/Sub takes, in bytes.
const maxOrderingKeyLen = 1024

// OrderingKey returns the Pub/Sub ordering key of a message of ordering
// key key (the key, or the id for a NULL key): the key itself up to 1024
// bytes, else "sha256:" and its hex SHA-256, the same for every message of
// the key (the key itself travels in the key attribute).
func OrderingKey(key string) string {
	if len(key) <= maxOrderingKeyLen {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}
