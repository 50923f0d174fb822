package sns

import (
	"errors"
	"fmt"
	"strings"

	"github.com/walpost/walpost/internal/publish/nametmpl"
)

var errIllegalTopic = errors.New("sns: illegal topic name")

func legalTopicChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

// topicShape allows a '.' only in the ".fifo" suffix.
func topicShape(name string) error {
	if i := strings.IndexByte(name, '.'); i >= 0 && (name[i:] != ".fifo" || i == 0) {
		return fmt.Errorf("%w: '.' at offset %d: only a FIFO topic's \".fifo\" suffix may hold one", errIllegalTopic, i)
	}
	return nil
}

// topicValue refuses a '.' in what a type or key brings into a name: it
// could make the name end in ".fifo".
func topicValue(v string) error {
	if i := strings.IndexByte(v, '.'); i >= 0 {
		return fmt.Errorf("%w: '.' at offset %d: the \".fifo\" suffix may come only from the template", errIllegalTopic, i)
	}
	return nil
}

// topicRules are SNS's rules for topic names: 1 to 256 characters of
// [a-zA-Z0-9_-], and a FIFO topic's ".fifo" suffix from the template.
var topicRules = nametmpl.Rules{
	Broker: "SNS", MaxLen: 256, LegalChar: legalTopicChar,
	Allowed: "a-z, A-Z, 0-9, '_', '-' (and a final \".fifo\")", Illegal: errIllegalTopic,
	Extra: topicShape, Value: topicValue,
}

func parseTopic(text string) (*nametmpl.Template, error) {
	t, err := nametmpl.Parse("topic_arn", text, topicRules)
	if err != nil {
		return nil, err
	}
	return t, nil
}
