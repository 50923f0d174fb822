package natsjs

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/walpost/walpost/internal/publish"
)

// session is one connection and its JetStream context. A session never
// reconnects (nats.NoReconnect): when its connection is lost, Publish
// returns a transient error and the next Publish opens a new session, so
// that no Publish call sends on two connections (see the package doc,
// "Ordering").
type session struct {
	nc *nats.Conn
	js jetstream.JetStream
	// async receives the connection's asynchronous errors that fail a
	// publish (a permissions violation), without blocking the sender.
	async chan error
	// gone is closed when the connection closes: nats.go does not fail
	// the pending PubAck futures of a connection that does not reconnect.
	gone chan struct{}
	// version is the server's, [major, minor, patch] (schedule.go).
	version [3]int
}

// session returns the current session, opening one (and creating the
// stream when stream.create is set) when there is none or its connection
// is gone. It returns promptly when ctx ends; a connection that arrives
// after that is closed.
func (s *Sink) session(ctx context.Context) (*session, error) {
	s.sessMu.Lock()
	cur := s.sess
	s.sessMu.Unlock()
	if cur != nil && cur.nc.IsConnected() {
		return cur, nil
	}
	s.dropSession()
	// Close ends the wait as ctx does.
	dctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-s.closed:
			cancel(errClosed)
		case <-dctx.Done():
		}
	}()
	sess, err := publish.DialContext(dctx, func() (*session, error) { return s.connect(ctx) },
		func(sess *session) { sess.nc.Close() })
	if err != nil {
		if errors.Is(context.Cause(dctx), errClosed) {
			return nil, errClosed
		}
		return nil, err
	}
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	select {
	case <-s.closed:
		sess.nc.Close()
		return nil, errClosed
	default:
	}
	s.sess = sess
	return sess, nil
}

// connect opens a connection and, with stream.create, makes sure the
// stream exists. Errors are classified and hinted like a publish's.
func (s *Sink) connect(ctx context.Context) (*session, error) {
	sess := &session{async: make(chan error, 1), gone: make(chan struct{})}
	log := s.log
	opts := append(slices.Clip(s.opts),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				select {
				case sess.async <- err:
				default:
				}
			}
			log.Warn().Err(err).Msg("nats: asynchronous error from the server")
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(sess.gone) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn().Err(err).Msg("nats: connection lost; the next publish reconnects")
			}
		}),
	)
	nc, err := nats.Connect(s.servers, opts...)
	if err != nil {
		return nil, s.connectError(err)
	}
	// nats.go caps the PubAcks in flight on its own (4000 by default) and
	// fails a publish that waits 200ms for room: the sink's max_pending
	// must be the only cap.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(s.cfg.MaxPending))
	if err != nil {
		nc.Close()
		return nil, err
	}
	sess.nc, sess.js = nc, js
	sess.version = parseVersion(nc.ConnectedServerVersion())
	if err := s.checkVersion(sess); err != nil {
		nc.Close()
		return nil, err
	}
	if s.cfg.Stream.Create {
		if err := s.ensureStream(ctx, js); err != nil {
			nc.Close()
			return nil, err
		}
	}
	s.log.Info().Str("server", nc.ConnectedUrlRedacted()).Str("server_id", nc.ConnectedServerId()).
		Int64("max_payload", nc.MaxPayload()).Msg("nats sink connected")
	return sess, nil
}

// connectError names the servers (without their passwords), and marks
// what the configuration must fix as Permanent.
func (s *Sink) connectError(err error) error {
	err = fmt.Errorf("connecting to %s: %w", s.shownServers(), err)
	if v := classify(err); v.permanent {
		return publish.Permanent(fmt.Errorf("%w; %s", err, v.hint))
	}
	return err
}

// ensureStream creates the configured stream when it does not exist. An
// existing stream is used as it is: the sink does not change it.
func (s *Sink) ensureStream(ctx context.Context, js jetstream.JetStream) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AckTimeout.D())
	defer cancel()
	sc := s.cfg.Stream
	_, err := js.Stream(ctx, sc.Name)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("looking up stream %q: %w", sc.Name, err)
	}
	storage := jetstream.FileStorage
	if sc.Storage == "memory" {
		storage = jetstream.MemoryStorage
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       sc.Name,
		Subjects:   sc.Subjects,
		Storage:    storage,
		Replicas:   sc.Replicas,
		Duplicates: sc.DuplicateWindow.D(),
		// Per-message TTL and message schedules, for expires_at and
		// deliver_at (server 2.11+ and 2.12+).
		AllowMsgTTL:       s.expiresAt,
		AllowMsgSchedules: s.cfg.ScheduleSubject != "",
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		err = fmt.Errorf("creating stream %q on subjects %q (stream.create): %w", sc.Name, sc.Subjects, err)
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.Code >= 400 && apiErr.Code < 500 {
			// Overlapping subjects, a bad setting, not allowed: retrying
			// does not change it.
			return publish.Permanent(fmt.Errorf("%w; fix stream.subjects or create the stream yourself", err))
		}
		return err
	}
	s.log.Info().Str("stream", sc.Name).Strs("subjects", sc.Subjects).Msg("nats sink created its stream")
	return nil
}

// dropSession closes the current session, if any.
func (s *Sink) dropSession() {
	s.sessMu.Lock()
	sess := s.sess
	s.sess = nil
	s.sessMu.Unlock()
	if sess != nil {
		sess.nc.Close()
	}
}

func (s *Sink) shownServers() string {
	shown := ""
	for i, sv := range s.cfg.Servers {
		if i > 0 {
			shown += ","
		}
		shown += showServer(sv)
	}
	return shown
}
