package natsjs

import "context"

// Start connects before the relay streams (publish.Starter): the server's
// version is checked against columns.deliver_at and columns.expires_at
// (schedule.go), and with stream.create the stream is made, so that a
// server that cannot honour the configuration stops the relay at start,
// not at the first message. The session is kept for the first Publish. A
// server that cannot be reached is a transient error.
func (s *Sink) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.session(ctx)
	return err
}
