package rabbitmq

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walpost/walpost/internal/publish"
)

// session is one AMQP connection with one channel in confirm mode, the
// notifications the sink listens to, and the exchanges already checked or
// declared on it. The sink owns at most one session at a time and drops it
// after any failure that may leave the channel with publishes whose
// outcome is unknown; the next Publish dials a new one (see the package
// doc, "Reconnects").
//
// A session is used by one Publish call at a time (the sink's mutex);
// abort and blockedReason may be called from any goroutine.
type session struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	raw     net.Conn           // the TCP (or TLS) connection under conn, closed by abort
	closed  chan *amqp.Error   // the channel's close notification
	returns chan amqp.Return   // basic.return of mandatory publishes
	pending []amqp.Return      // returns read from returns, not yet matched to a message
	known   map[string]bool    // exchanges that exist on the server, as far as this session saw
	blocked chan amqp.Blocking // connection.blocked / unblocked

	mu            sync.Mutex
	blockedReason string // non-empty while RabbitMQ blocks the connection
	aborted       bool
}

// dialer holds what every connection needs.
type dialer struct {
	url         string
	tls         *tls.Config
	heartbeat   time.Duration
	timeout     time.Duration
	maxInFlight int
	name        string // the sink's name, sent as connection_name
}

// maxKnownExchanges bounds a session's cache of exchanges that exist (a
// template may make many names); it is cleared when full.
const maxKnownExchanges = 4096

// dial opens a connection and a channel in confirm mode. It returns
// promptly when ctx ends (a handshake still running is abandoned and its
// connection closed when it completes, within timeout).
func (d *dialer) dial(ctx context.Context) (*session, error) {
	return publish.DialContext(ctx, d.open, (*session).close)
}

// open does dial's work synchronously, bounded by d.timeout.
func (d *dialer) open() (*session, error) {
	s := &session{known: map[string]bool{}}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("walpost sink " + d.name)
	cfg := amqp.Config{
		Heartbeat:       d.heartbeat,
		TLSClientConfig: d.tls,
		Properties:      props,
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := net.DialTimeout(network, addr, d.timeout)
			if err != nil {
				return nil, err
			}
			// The deadline bounds the TLS and AMQP handshakes; the client
			// clears it once the connection is open.
			if err := c.SetDeadline(time.Now().Add(d.timeout)); err != nil {
				c.Close()
				return nil, err
			}
			s.mu.Lock()
			s.raw = c
			s.mu.Unlock()
			return c, nil
		},
	}
	if d.tls != nil {
		cfg.TLSClientConfig = d.tls.Clone()
	}
	conn, err := amqp.DialConfig(d.url, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", err)
	}
	s.conn = conn
	s.blocked = conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	go s.watchBlocked()
	if err := s.openChannel(d.maxInFlight, d.timeout); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// openChannel opens the session's channel and puts it in confirm mode,
// within timeout (a server that stops answering after the handshake).
func (s *session) openChannel(maxInFlight int, timeout time.Duration) error {
	t := time.AfterFunc(timeout, s.abort)
	defer t.Stop()
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("opening a channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("enabling publisher confirms: %w", err)
	}
	s.ch = ch
	s.closed = ch.NotifyClose(make(chan *amqp.Error, 1))
	// A return is sent before the ack of its message, and at most
	// maxInFlight messages are unconfirmed: the buffer never fills, so
	// the client never drops a return (it gives up on a full listener
	// after 5s).
	s.returns = ch.NotifyReturn(make(chan amqp.Return, maxInFlight+1))
	return nil
}

// watchBlocked records connection.blocked notifications until the
// connection closes (the client closes the channel then).
func (s *session) watchBlocked() {
	for b := range s.blocked {
		s.mu.Lock()
		if b.Active {
			s.blockedReason = b.Reason
		} else {
			s.blockedReason = ""
		}
		s.mu.Unlock()
	}
}

// blockedBy returns why RabbitMQ blocks the connection (a memory or disk
// alarm), or "".
func (s *session) blockedBy() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.blockedReason
}

// abort breaks the session at once by closing its socket: a publish
// blocked on a full socket (RabbitMQ stops reading from a blocked
// connection) returns, and the client resolves every pending confirm. It
// is safe to call from any goroutine and more than once.
func (s *session) abort() {
	s.mu.Lock()
	s.aborted = true
	raw := s.raw
	s.mu.Unlock()
	if raw != nil {
		raw.Close()
	}
}

// broken reports whether the session can no longer be used.
func (s *session) broken() bool {
	s.mu.Lock()
	aborted := s.aborted
	s.mu.Unlock()
	return aborted || s.ch == nil || s.ch.IsClosed() || s.conn.IsClosed()
}

// closeReason returns why the channel closed: the server's channel or
// connection exception, or nil (a graceful close, or a socket closed
// without one: the caller reports amqp.ErrClosed then).
func (s *session) closeReason() *amqp.Error {
	select {
	case e := <-s.closed:
		if e != nil {
			// Keep it for a later caller.
			s.closed = closedWith(e)
		}
		return e
	default:
		return nil
	}
}

// closedWith returns a closed channel that yields e once, then nil.
func closedWith(e *amqp.Error) chan *amqp.Error {
	c := make(chan *amqp.Error, 1)
	c <- e
	close(c)
	return c
}

// close closes the connection, within a second (a server that does not
// answer its close-ok is not waited for).
func (s *session) close() {
	if s.conn != nil {
		if err := s.conn.CloseDeadline(time.Now().Add(time.Second)); err != nil {
			s.abort()
		}
	} else {
		s.abort()
	}
}
