package servicebus

import (
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

var _ publish.RefusalUnits = (*Sink)(nil)

// RefusalUnit is the entity m goes to (publish.RefusalUnits, used under
// relay.on_refused: hold_key): a call's messages to one entity go in
// order, and a refused one stops that entity's later ones; entities are
// sent independently, so the runner never puts one key's messages for
// two entities in one call.
func (s *Sink) RefusalUnit(m *message.Message) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	entity, err := s.entity.Expand(m)
	if err != nil {
		return "", true // refused for its name
	}
	return entity, true
}
