package sns

import (
	"strings"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

var _ publish.RefusalUnits = (*Sink)(nil)

// RefusalUnit is the topic m goes to (publish.RefusalUnits, used under
// relay.on_refused: hold_key): topics are published to independently, so
// the runner never puts one key's messages for two topics in one call. A
// FIFO topic's refusal is ordered (SettleBatch reports per message group
// only the entries before the group's first failed one); a standard
// topic's is not: it stores a request's later entries of the key after a
// refused one, so the runner sends no two messages of a key to it in one
// call.
func (s *Sink) RefusalUnit(m *message.Message) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	topic, err := s.topic.Expand(m)
	if err != nil {
		return "", true // refused for its name
	}
	return topic, strings.HasSuffix(topic, ".fifo")
}
