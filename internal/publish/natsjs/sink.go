package natsjs

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

func init() {
	publish.Register("nats", publish.FactoryOf(New))
	publish.RegisterScheduling("nats", "server 2.12+ message schedules, with schedule_subject")
}

// Schedules reports that the sink holds messages back until their
// deliver_at, as JetStream message schedules (publish.Scheduler). Without
// schedule_subject, or on a server before 2.12, it refuses such a message
// instead.
func (s *Sink) Schedules() bool { return true }

// Sink publishes outbox messages to NATS JetStream (see the package doc).
//
// Publish calls are serialized by the sink (a second caller waits for the
// first), which the ordering argument needs; Name and Close are safe to
// call from any goroutine. Publish is not called after Close.
type Sink struct {
	name    string
	log     zerolog.Logger
	cfg     natsConfig
	subject subjectTemplate
	opts    []nats.Option // connection options, files loaded
	servers string        // comma-separated, as nats.Connect takes them
	// columns.deliver_at and columns.expires_at are mapped: the server's
	// version is checked at connect (schedule.go).
	deliverAt, expiresAt bool

	mu   sync.Mutex // serializes Publish
	sess *session   // the current connection; nil before the first Publish and after a failure that may be the connection's

	closeOnce sync.Once
	closed    chan struct{} // closed by Close: Publish stops waiting
	sessMu    sync.Mutex    // guards sess against Close
}

var _ publish.Sink = (*Sink)(nil)

// New builds a nats sink from its configuration: it decodes the kind's
// settings strictly, fills in defaults, validates them (errors name the
// field, e.g. "subject: empty") and loads the TLS and NKey files. It does
// not connect: the first Publish does, and a server that is down then is
// a transient error, not a failed start.
func New(cfg *config.Sink, log zerolog.Logger) (publish.Sink, error) {
	var nc natsConfig
	if err := publish.DecodeSettings(cfg, &nc); err != nil {
		return nil, err
	}
	if cfg.DeliverAt && nc.ScheduleSubject == "" {
		return nil, errors.New("schedule_subject: empty, but columns.deliver_at is mapped: NATS (server 2.12+) holds a message back as a message schedule " +
			"stored on a subject of its own; set schedule_subject (e.g. outbox.scheduled), on a stream with allow_msg_schedules " +
			"that covers both it and the message subjects, or remove columns.deliver_at")
	}
	s, err := open(cfg.Name, nc, log)
	if err != nil {
		return nil, err
	}
	s.deliverAt, s.expiresAt = cfg.DeliverAt, cfg.ExpiresAt
	return s, nil
}

// open builds the sink from validated settings.
func open(name string, c natsConfig, log zerolog.Logger) (*Sink, error) {
	subject, err := parseSubject(c.Subject)
	if err != nil {
		return nil, err
	}
	opts, tc, err := c.options()
	if err != nil {
		return nil, err
	}
	s := &Sink{
		name: name, log: log, cfg: c, subject: subject, opts: opts,
		servers: strings.Join(c.Servers, ","),
		closed:  make(chan struct{}),
	}
	if tc != nil && tc.InsecureSkipVerify {
		log.Warn().Msg("nats sink with tls.insecure_skip_verify: the servers' certificates are not verified, " +
			"so a man-in-the-middle can read and alter messages (and credentials); set tls.ca_file instead")
	}
	if (c.Password != "" || c.Token != "") && tc == nil && !anyTLSServer(c.Servers) {
		log.Warn().Msg("nats sink with a password or token but without TLS: it crosses the network in clear text")
	}
	shown := make([]string, len(c.Servers))
	for i, sv := range c.Servers {
		shown[i] = showServer(sv)
	}
	log.Info().Strs("servers", shown).Str("subject", c.Subject).Str("stream", c.Stream.Name).
		Bool("stream_create", c.Stream.Create).Int("max_pending", c.MaxPending).Str("format", c.Format).
		Bool("tls", tc != nil).Msg("nats sink configured")
	return s, nil
}

func anyTLSServer(servers []string) bool {
	for _, s := range servers {
		if strings.HasPrefix(strings.ToLower(s), "tls://") {
			return true
		}
	}
	return false
}

// options returns the connection options: no reconnect of nats.go's own
// (see the package doc, "Ordering"), the timeouts, the authentication and
// TLS. It loads the TLS files and the NKey seed, never printing them.
func (c *natsConfig) options() ([]nats.Option, *tls.Config, error) {
	opts := []nats.Option{
		nats.Name(c.ClientName),
		nats.Timeout(c.ConnectTimeout.D()),
		nats.NoReconnect(),
		nats.ReconnectBufSize(-1),
	}
	switch {
	case c.CredentialsFile != "":
		opts = append(opts, nats.UserCredentials(c.CredentialsFile))
	case c.NKeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(c.NKeySeedFile)
		if err != nil {
			// nats.go's errors about the seed name the problem, never the seed.
			return nil, nil, fmt.Errorf("nkey_seed_file: %s: %w", c.NKeySeedFile, err)
		}
		opts = append(opts, o)
	case c.Token != "":
		opts = append(opts, nats.Token(c.Token))
	case c.User != "":
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	tc, err := c.TLS.Build()
	if err != nil {
		return nil, nil, err
	}
	if tc != nil {
		opts = append(opts, nats.Secure(tc))
	}
	return opts, tc, nil
}

// Name returns the sink's configured name.
func (s *Sink) Name() string { return s.name }

// Publish sends msgs, in order, and returns nil only when JetStream has
// acknowledged every one of them with a PubAck.
//
// The messages go out asynchronously, at most max_pending without a
// PubAck at a time, in order on one connection. At the first message
// without a PubAck (refused, not answered within ack_timeout, or the
// connection lost) Publish stops sending and returns an error naming that
// message, marked Rejected, Permanent or neither (see classify), and with
// publish.Partial for the messages before it, which all got PubAcks: the
// retry resends the rest, and the duplicate window drops what was stored
// already. When ctx ends Publish returns at once with an error wrapping
// ctx.Err(), also with Partial.
func (s *Sink) Publish(ctx context.Context, msgs []*message.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("nats: publishing %s: %w", publish.DescribeCall(msgs), err)
	}
	nm := make([]*nats.Msg, len(msgs))
	for i, m := range msgs {
		subject, err := s.subject.Expand(m)
		if err != nil {
			return publish.Rejected(fmt.Errorf("nats: %w", publish.NameError(m, "subject", subject, s.subject.Text(), err)))
		}
		if nm[i], err = natsMsg(m, subject, &s.cfg.Settings); err != nil {
			return publish.Rejected(fmt.Errorf("nats: %s: %w", publish.Describe(m), err))
		}
	}
	sess, err := s.session(ctx)
	if err != nil {
		return fmt.Errorf("nats: publishing %s: %w", publish.DescribeCall(msgs), err)
	}
	now := time.Now()
	var refused error // of msgs[len(nm)]: the messages before it go first
	for i, m := range msgs {
		if err := s.schedule(sess, nm[i], m, now); err != nil {
			refused = publish.Rejected(fmt.Errorf("nats: %s: %w", publish.Describe(m), err))
			nm = nm[:i]
			break
		}
	}
	if len(nm) == 0 {
		return refused
	}
	n, err := s.send(ctx, sess, nm)
	if err == nil && refused == nil {
		return nil
	}
	if err == nil {
		return publish.Partial(refused, publish.DonePrefix(len(msgs), n))
	}
	return publish.Partial(s.failed(ctx, sess, err, msgs, nm, n), publish.DonePrefix(len(msgs), n))
}

// failed turns the error of message i into the error Publish returns:
// named, classified, and with the session dropped when the connection
// may be at fault.
func (s *Sink) failed(ctx context.Context, sess *session, err error, msgs []*message.Message, nm []*nats.Msg, i int) error {
	m := msgs[i]
	msg := fmt.Sprintf("nats: %s to subject %q", publish.Describe(m), nm[i].Subject)
	if len(msgs) > 1 {
		msg += fmt.Sprintf(" (%d of the call's %d messages not acknowledged)", len(msgs)-i, len(msgs))
	}
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return fmt.Errorf("%s: %w", msg, err)
	}
	v := classify(err)
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		v = s.noResponders(ctx, sess, nm[i].Subject)
	}
	if v.hint != "" {
		err = fmt.Errorf("%s: %w; %s", msg, err, v.hint)
	} else {
		err = fmt.Errorf("%s: %w", msg, err)
	}
	switch {
	case v.rejected:
		return publish.Rejected(err)
	case v.permanent:
		return publish.Permanent(err)
	}
	if v.reconnect {
		s.dropSession()
	}
	return err
}

// noResponders decides a publish to subject that the server answered
// with "no responders". That is what a subject no stream covers gets, but
// also, briefly, a subject of a clustered stream that is moving its
// leader: the sink asks JetStream once (within ack_timeout) which stream
// covers the subject, and the error is Permanent only when the answer is
// none.
//
// For a templated subject it also asks whether any stream takes subjects
// the template makes (its wildcard): if one does, this message's subject
// is outside the streams the operator made, and the message is refused
// (relay.on_refused applies); if none does, no message could be stored
// and the error stays Permanent.
func (s *Sink) noResponders(ctx context.Context, sess *session, subject string) verdict {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AckTimeout.D())
	defer cancel()
	_, err := sess.js.StreamNameBySubject(ctx, subject)
	covered := false
	if errors.Is(err, jetstream.ErrStreamNotFound) && !s.subject.Fixed() {
		names := sess.js.StreamNames(ctx, jetstream.WithStreamListSubject(s.subject.wildcard()))
		for range names.Name() {
			covered = true
		}
		if names.Err() != nil {
			return verdict{hint: "listing the streams failed; retrying"}
		}
	}
	return noRespondersVerdict(err, covered)
}

// errClosed ends a Publish that Close interrupted.
var errClosed = errors.New("nats: sink closed")

// errAckTimeout is a PubAck that did not come within ack_timeout.
var errAckTimeout = errors.New("nats: no PubAck within ack_timeout")

// pending is a message sent and not yet acknowledged.
type pending struct {
	paf  jetstream.PubAckFuture
	sent time.Time
}

// send publishes nm in order, at most max_pending unacknowledged, and
// returns how many of them, from the first, got a PubAck: all of them
// with a nil error, or n and the error of nm[n]. It stops sending at the
// first failure it sees.
func (s *Sink) send(ctx context.Context, sess *session, nm []*nats.Msg) (int, error) {
	window := make([]pending, 0, min(len(nm), s.cfg.MaxPending))
	acked := 0 // nm[:acked] got PubAcks; window holds nm[acked:acked+len(window)]
	opts := []jetstream.PublishOpt{jetstream.WithRetryAttempts(0)}
	if s.cfg.Stream.Name != "" {
		opts = append(opts, jetstream.WithExpectStream(s.cfg.Stream.Name))
	}
	for i, m := range nm {
		if len(window) == s.cfg.MaxPending {
			if err := s.await(ctx, sess, window[0]); err != nil {
				return acked, err
			}
			window = window[1:]
			acked++
		}
		paf, err := sess.js.PublishMsgAsync(m, opts...)
		if err != nil {
			// A message the client refuses (over max_payload) or a
			// connection gone: what was sent before it may still be
			// acknowledged, and counts.
			for len(window) > 0 {
				if werr := s.await(ctx, sess, window[0]); werr != nil {
					return acked, werr
				}
				window = window[1:]
				acked++
			}
			return i, err
		}
		window = append(window, pending{paf: paf, sent: time.Now()})
	}
	for len(window) > 0 {
		if err := s.await(ctx, sess, window[0]); err != nil {
			return acked, err
		}
		window = window[1:]
		acked++
	}
	return acked, nil
}

// await waits for p's PubAck: nil when it came, else the error that came
// instead, an asynchronous error of the connection (a permissions
// violation), the connection's closing, errAckTimeout after ack_timeout from p's sending, ctx's
// error or errClosed.
func (s *Sink) await(ctx context.Context, sess *session, p pending) error {
	timer := time.NewTimer(s.cfg.AckTimeout.D() - time.Since(p.sent))
	defer timer.Stop()
	select {
	case <-p.paf.Ok():
		return nil
	case err := <-p.paf.Err():
		return err
	case err := <-sess.async:
		return err
	case <-sess.gone:
		select {
		case <-p.paf.Ok(): // it came before the connection closed
			return nil
		default:
			return fmt.Errorf("waiting for a PubAck: %w", nats.ErrConnectionClosed)
		}
	case <-timer.C:
		return errAckTimeout
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closed:
		return errClosed
	}
}

// Close closes the connection; a Publish waiting for PubAcks returns. It
// is safe to call more than once.
func (s *Sink) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.dropSession()
	})
	return nil
}
