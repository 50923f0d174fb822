package natsjs

import (
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

var _ publish.RefusalUnits = (*Sink)(nil)

// RefusalUnit is the subject m goes to, not ordered (publish.RefusalUnits,
// used under relay.on_refused: hold_key): JetStream acknowledges each
// message on its own, so a message refused by its stream (over
// max_msg_size, say) does not stop the call's later ones from being
// stored, on its subject or another. The runner never puts two messages
// of one key in one call.
func (s *Sink) RefusalUnit(m *message.Message) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	subject, _ := s.subject.Expand(m)
	return subject, false
}
