package kafka

import (
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

var _ publish.RefusalUnits = (*Sink)(nil)

// RefusalUnit is the topic m goes to (publish.RefusalUnits, used under
// relay.on_refused: hold_key): a key goes to one partition of a topic,
// and a record refused there fails the call's later records of that
// partition. Across topics (a template) a refusal is not ordered, so the
// runner never puts one key's records for two topics in one call.
func (s *Sink) RefusalUnit(m *message.Message) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	topic, err := s.topic.Expand(m)
	if err != nil {
		return "", true // refused for its name
	}
	return topic, true
}
