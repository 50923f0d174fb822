package sqs

import (
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

var _ publish.RefusalUnits = (*Sink)(nil)

// RefusalUnit is the queue m goes to (publish.RefusalUnits, used under
// relay.on_refused: hold_key): queues are sent to independently, so the
// runner never puts one key's messages for two queues in one call. A
// FIFO queue's refusal is ordered (SettleBatch reports per message group
// only the entries before the group's first failed one); a standard
// queue's is not: it stores a request's later entries of the key after
// a refused one, so the runner sends no two messages of a key to it in
// one call.
func (s *Sink) RefusalUnit(m *message.Message) (string, bool) {
	if s.queue == nil {
		return s.queueURL, isFIFO(s.queueURL)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue.Expand(m)
	if err != nil {
		return "", true // refused for its name
	}
	return q, isFIFO(q)
}
