package rabbitmq

import (
	"context"
	"fmt"

	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/redact"
)

// Start connects and, for a fixed exchange, checks it exists (or
// declares it with declare_exchange), before the relay streams
// (publish.Starter): a missing exchange, an exchange of another type, or
// exchange_type: x-delayed-message on a server without the
// delayed-message plugin stop the relay at start with the error Publish
// would give at the first message. The session is kept for the first
// Publish. A server that cannot be reached is a transient error.
func (s *Sink) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	about := "sink " + s.name + " at start"
	sess, err := s.dialer.dial(ctx)
	if err != nil {
		return s.scrub(s.failure(ctx, err, fmt.Sprintf("rabbitmq: %s: connecting to %s", about, redact.URL(s.dialer.url))))
	}
	if fixedName(s.exchange) {
		name := s.exchange.Text()
		tctx, cancel := context.WithTimeout(ctx, s.timeout)
		stop := context.AfterFunc(tctx, sess.abort)
		declared, err := s.exchange1(sess, name)
		stop()
		cancel()
		if err != nil {
			sess.close()
			return s.scrub(s.exchangeFailed(ctx, err, about, name, declared))
		}
	}
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	if s.closed {
		go sess.close()
		return publish.Permanent(fmt.Errorf("rabbitmq: sink %s is closed", s.name))
	}
	if s.sess != nil {
		go s.sess.close()
	}
	s.sess = sess
	s.log.Debug().Str("url", redact.URL(s.dialer.url)).Msg("rabbitmq sink connected at start")
	return nil
}
