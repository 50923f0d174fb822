package claimcheck

import (
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

// RefusalUnit is the inner sink's (publish.RefusalUnits): the claim check
// changes a message's payload, not where it goes. An inner sink without
// it takes a call as one unit.
func (s *Sink) RefusalUnit(m *message.Message) (string, bool) {
	if ru, ok := s.inner.(publish.RefusalUnits); ok {
		return ru.RefusalUnit(m)
	}
	return "", true
}
