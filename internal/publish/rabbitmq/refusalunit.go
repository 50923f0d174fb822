package rabbitmq

import (
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

var _ publish.RefusalUnits = (*Sink)(nil)

// RefusalUnit is the exchange and routing key m goes to
// (publish.RefusalUnits, used under relay.on_refused: hold_key): a
// message refused for its route (unroutable, say) leaves the call's
// messages with other routes stored, so the runner never puts one key's
// messages for two routes in one call.
func (s *Sink) RefusalUnit(m *message.Message) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	exchange, err := s.exchange.Expand(m)
	if err != nil {
		return "", true // refused for its name
	}
	key, err := s.routingKey.Expand(m)
	if err != nil {
		return "", true
	}
	return exchange + "\x00" + key, true
}
