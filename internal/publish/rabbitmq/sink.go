package rabbitmq

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/publish/nametmpl"
	"github.com/walpost/walpost/internal/redact"
)

func init() {
	publish.Register("rabbitmq", publish.FactoryOf(New))
	publish.RegisterScheduling("rabbitmq", "exchange_type: x-delayed-message, the delayed-message plugin")
}

// Schedules reports whether the sink holds messages back until their
// deliver_at: with exchange_type: x-delayed-message only, through the
// x-delay header (publish.Scheduler).
func (s *Sink) Schedules() bool { return s.exchangeType == DelayedExchangeType }

// HeaderKey is the header that carries the message's ordering key; it is
// left out when the key is NULL.
const HeaderKey = "key"

// CloudEventsPrefix starts the name of every CloudEvents attribute in the
// headers table with format: cloudevents (the AMQP binding's
// application-property prefix).
const CloudEventsPrefix = "cloudEvents:"

// HeaderPartitionKey carries the ordering key with format: cloudevents
// (the CloudEvents Partitioning extension), unless the key is NULL.
const HeaderPartitionKey = CloudEventsPrefix + "partitionkey"

// AppID is the app_id property of every message.
const AppID = "walpost"

// Sink publishes outbox messages to RabbitMQ (see the package doc).
//
// Publish calls are serialized by the sink (a second caller waits for the
// first), which is what the ordering argument needs; Name and Close are
// safe to call from any goroutine, also during a Publish (which then
// fails). Publish is not called after Close.
type Sink struct {
	name         string
	log          zerolog.Logger
	exchange     *nametmpl.Template
	routingKey   *nametmpl.Template
	declare      bool
	exchangeType string
	delayedType  string  // with exchangeType x-delayed-message
	declarable   nameSet // the templated exchanges declare_exchange may declare
	maxInFlight  int
	maxBytes     int
	timeout      time.Duration
	env          envelope.Settings
	dialer       dialer
	vhost        string
	secrets      *redact.Set // the URL's password, in every form

	mu  sync.Mutex // serializes Publish; guards the templates' caches and buf
	buf []outgoing // reused between calls

	sessMu sync.Mutex // guards sess and closed
	sess   *session   // nil until the first Publish, and after a failure
	closed bool
}

var _ publish.Sink = (*Sink)(nil)

// outgoing is one message as it goes to RabbitMQ.
type outgoing struct {
	exchange, key string
	pub           amqp.Publishing
}

// New makes a rabbitmq sink from its configuration: it decodes the kind's
// settings strictly, fills in defaults, validates them (errors name the
// field, e.g. "url: empty") and loads the TLS files. It does not connect:
// the first Publish does, and a server that is down then is a transient
// error, not a failed start.
func New(cfg *config.Sink, log zerolog.Logger) (publish.Sink, error) {
	var rc rabbitConfig
	if err := publish.DecodeSettings(cfg, &rc); err != nil {
		return nil, err
	}
	if cfg.DeliverAt {
		if err := rc.checkDeliverAt(); err != nil {
			return nil, err
		}
	}
	return open(cfg.Name, rc, log)
}

// open builds the sink from validated settings.
func open(name string, rc rabbitConfig, log zerolog.Logger) (*Sink, error) {
	u, err := parseURL(rc.URL)
	if err != nil {
		return nil, err
	}
	exchange, err := parseExchange(rc.Exchange)
	if err != nil {
		return nil, err
	}
	routingKey, err := parseRoutingKey(rc.RoutingKey)
	if err != nil {
		return nil, err
	}
	var tc *tls.Config // TLS is on exactly for amqps://
	if u.Scheme == "amqps" {
		if tc, err = rc.TLS.Build(); err != nil {
			return nil, err
		}
	}
	s := &Sink{
		name:         name,
		log:          log,
		exchange:     exchange,
		routingKey:   routingKey,
		declare:      rc.DeclareExchange,
		declarable:   declarable(rc.DeclareExchanges, exchange),
		exchangeType: rc.ExchangeType,
		delayedType:  rc.DelayedType,
		maxInFlight:  rc.MaxInFlight,
		maxBytes:     rc.MaxMessageBytes,
		timeout:      rc.Timeout.D(),
		env:          rc.Settings,
		vhost:        u.Vhost,
		secrets:      redact.NewSet(redact.URLSecrets(rc.URL)...),
		dialer: dialer{
			url:         rc.URL,
			tls:         tc,
			heartbeat:   rc.Heartbeat.D(),
			timeout:     rc.Timeout.D(),
			maxInFlight: rc.MaxInFlight,
			name:        name,
		},
	}
	if tc != nil && tc.InsecureSkipVerify {
		log.Warn().Msg("rabbitmq sink with tls.insecure_skip_verify: the server's certificate is not verified, " +
			"so a man-in-the-middle can read and alter messages (and the password); set tls.ca_file instead")
	}
	if tc == nil && u.Host != "127.0.0.1" && u.Host != "localhost" && u.Host != "::1" {
		log.Info().Msg("rabbitmq sink without TLS: the password crosses the network in clear text (use amqps:// to encrypt)")
	}
	if rc.DeclareExchange && rc.DeclareExchanges == nil && strings.HasPrefix(rc.Exchange, "{") {
		log.Warn().Str("exchange", rc.Exchange).Msg("rabbitmq sink with declare_exchange: true and an exchange template that starts with a placeholder: " +
			"a message's type or key must not create an exchange of its choosing, so the sink declares none of them (each must exist, " +
			"or a message to it is refused); list the exchanges it may declare in declare_exchanges")
	}
	log.Info().Str("url", redact.URL(rc.URL)).Str("exchange", rc.Exchange).Str("routing_key", rc.RoutingKey).
		Bool("declare_exchange", rc.DeclareExchange).Str("format", rc.Format).Msg("rabbitmq sink configured")
	return s, nil
}

// Name returns the sink's configured name.
func (s *Sink) Name() string { return s.name }

// Publish sends msgs, in order, on one channel in confirm mode, and
// returns nil only when RabbitMQ has confirmed (basic.ack) every one of
// them and returned none (mandatory).
//
// A message whose exchange or routing key (from the templates) is not one
// AMQP accepts, or whose body is over max_message_bytes, fails the call
// before anything is sent, with a Rejected error naming it. A missing
// fixed exchange (declare_exchange: false) fails it before anything is
// sent, with a Permanent error saying to create it; RabbitMQ refusing an
// exchange from the template (404, 403, 406) fails it with a Rejected
// error (see exchangeFailed). Up to max_in_flight
// messages are unconfirmed at a time. On the first failure Publish
// returns, marked with publish.Partial to report the confirmed prefix of
// msgs: an unroutable message (basic.return) is an error naming its
// exchange and routing key, Rejected when the exchange or routing key
// comes from a template that depends on the message, Permanent when both
// are fixed (every message would come back: a binding is missing); a nack, a lost connection or channel, a
// confirm that does not come within timeout are transient; refused
// credentials or permissions are Permanent (see classify). After any
// failure the session is dropped, and the next Publish connects anew.
// When ctx ends Publish returns at once with an error wrapping ctx.Err().
//
// Every error names the message (id and LSN) it concerns, and none holds
// the URL's password.
func (s *Sink) Publish(ctx context.Context, msgs []*message.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("rabbitmq: publishing %s: %w", publish.DescribeCall(msgs), err)
	}
	out, err := s.prepare(msgs)
	defer func() {
		clear(out) // drop references to payloads
		s.buf = out[:0]
	}()
	if err != nil {
		return err
	}
	sess, err := s.session(ctx, msgs, out)
	if err != nil {
		return s.scrub(err)
	}
	stop := context.AfterFunc(ctx, sess.abort)
	n, err := s.send(ctx, sess, msgs, out)
	stop()
	if err != nil {
		s.drop(sess)
		return s.scrub(publish.Partial(err, publish.DonePrefix(len(msgs), n)))
	}
	return nil
}

// prepare maps every message to its publishing, refusing one whose names
// or size RabbitMQ would not take.
func (s *Sink) prepare(msgs []*message.Message) ([]outgoing, error) {
	out := s.buf[:0]
	for _, m := range msgs {
		exchange, err := s.exchange.Expand(m)
		if err != nil {
			return out, publish.Rejected(fmt.Errorf("rabbitmq: %w", publish.NameError(m, "exchange", exchange, s.exchange.Text(), err)))
		}
		key, err := s.routingKey.Expand(m)
		if err != nil {
			return out, publish.Rejected(fmt.Errorf("rabbitmq: %w", publish.NameError(m, "routing key", key, s.routingKey.Text(), err)))
		}
		if len(m.Payload) > s.maxBytes {
			return out, publish.Rejected(fmt.Errorf("rabbitmq: %s to exchange %q: %d bytes, over max_message_bytes %d "+
				"(raise it, and the server's max_message_size, or park the message with relay.on_refused: dead_letter)",
				publish.Describe(m), exchange, len(m.Payload), s.maxBytes))
		}
		pub := Publishing(m, &s.env)
		if s.exchangeType == DelayedExchangeType {
			if err := Delay(&pub, m, time.Now()); err != nil {
				return out, err
			}
		}
		out = append(out, outgoing{exchange: exchange, key: key, pub: pub})
	}
	return out, nil
}

// routingHeader reports whether a headers column entry named k is one
// RabbitMQ acts on when routing: CC and BCC (sender-selected
// distribution) would send the message to other queues, BCC unseen by
// the consumers. Compared without regard to case.
func routingHeader(k string) bool {
	return strings.EqualFold(k, "CC") || strings.EqualFold(k, "BCC")
}

// brokerHeader reports whether a headers column entry named k is one
// RabbitMQ or its plugins set or act on: x-delay (the delayed-message
// exchange holds the message back for it), x-death, x-first-death-* and
// x-last-death-* (dead-lettering's record, which receivers count
// redeliveries by), x-received-from (shovels and federation). Compared
// without regard to case.
func brokerHeader(k string) bool {
	return strings.EqualFold(k, HeaderDelay) || strings.EqualFold(k, "x-death") || strings.EqualFold(k, "x-received-from") ||
		envelope.HasPrefixFold(k, "x-first-death-") || envelope.HasPrefixFold(k, "x-last-death-")
}

// Publishing maps an outbox message to its AMQP publishing (see the
// package doc, "Mapping"): persistent, message_id = id, type = type,
// content_type from the payload, timestamp = commit time (whole seconds),
// app_id walpost, body = payload as stored; headers = the headers column,
// "key" = the ordering key unless NULL (an entry named "key" in the column
// is left out: the message's own key wins), and with format: cloudevents
// the CloudEvents attributes as cloudEvents:specversion, cloudEvents:id,
// cloudEvents:source, cloudEvents:type, cloudEvents:time and
// cloudEvents:partitionkey (the key, unless NULL); a headers entry whose
// name starts with cloudEvents: (any case) is then left out. Entries
// named CC or BCC (routingHeader), the names RabbitMQ and its plugins
// set or act on (brokerHeader), and credentials, connection headers and
// walpost-* names (publish.KeepRowHeader) are always left out; the
// relay's own headers (message.RelayHeaders) come last.
func Publishing(m *message.Message, env *envelope.Settings) amqp.Publishing {
	var headers amqp.Table
	n := len(m.Headers) + 1
	if env.IsCloudEvents() {
		n += 6
	}
	if n > 1 || m.HasKey {
		headers = make(amqp.Table, n)
	}
	ce := env.IsCloudEvents()
	for k, v := range m.Headers {
		switch {
		case !publish.KeepRowHeader(k):
		case k == HeaderKey || ce && envelope.HasPrefixFold(k, CloudEventsPrefix):
			publish.LeaveOutRowHeader(k, publish.OwnRowHeader)
		case routingHeader(k) || brokerHeader(k):
			publish.LeaveOutRowHeader(k, publish.BrokerRowHeader)
		default:
			headers[k] = v
		}
	}
	if m.HasKey {
		headers[HeaderKey] = m.Key
	}
	if ce {
		for _, a := range env.Attributes(m) {
			headers[CloudEventsPrefix+a.Name] = a.Value
		}
		if m.HasKey {
			headers[HeaderPartitionKey] = m.Key
		}
	}
	for _, h := range m.RelayHeaders() {
		if headers == nil {
			headers = make(amqp.Table, 3)
		}
		headers[h.Name] = h.Value
	}
	if len(headers) == 0 {
		headers = nil
	}
	body := m.Payload
	if body == nil {
		body = []byte{}
	}
	p := amqp.Publishing{
		Headers:      headers,
		ContentType:  envelope.ContentType(m),
		DeliveryMode: amqp.Persistent,
		MessageId:    m.ID,
		Type:         m.Type,
		Timestamp:    m.EventTime(),
		AppId:        AppID,
		Body:         body,
	}
	if ttl := m.TTL(time.Now()); ttl > 0 && ttl <= MaxExpiry {
		// Per-message TTL in the queue, in whole milliseconds (at least
		// 1). A longer one is left out: RabbitMQ closes the channel
		// with 406 on an expiration over MaxExpiry, and a row's
		// far-future expires_at ('infinity' aside, 9999-12-31) must
		// neither stop the relay nor expire the message early.
		p.Expiration = strconv.FormatInt(max(ttl.Milliseconds(), 1), 10)
	}
	return p
}

// MaxExpiry is the longest per-message TTL (expiration) and x-delay
// RabbitMQ and the delayed-message plugin take: 2^32-1 milliseconds,
// about 49.7 days. An expires_at further ahead is sent without an
// expiration (the message does not expire in the queue); a deliver_at
// further ahead is refused (publish.Rejected, relay.on_refused), since
// sending it at once would deliver it early (docs/configuration.md,
// "Scheduled delivery and expiry").
const MaxExpiry = (1<<32 - 1) * time.Millisecond

// Delay sets the x-delay header of p, for an exchange of the
// delayed-message plugin, to how long after now m is to be delivered, in
// milliseconds (rounded up: never early); nothing when m is due (an
// x-delay entry of the headers column is always left out: brokerHeader).
// A delay over MaxExpiry is an error (publish.Rejected): the plugin takes
// none longer.
func Delay(p *amqp.Publishing, m *message.Message, now time.Time) error {
	d := m.Delay(now)
	if d <= 0 {
		return nil
	}
	if d > MaxExpiry {
		return publish.Rejected(fmt.Errorf("rabbitmq: %s: its deliver_at %s is more than %v ahead, the longest x-delay the delayed-message plugin takes; "+
			"it is not sent early: park it with relay.on_refused: dead_letter (resend it once its time is near) or fix the row",
			publish.Describe(m), m.DeliverAt.UTC().Format(time.RFC3339), MaxExpiry))
	}
	ms := (d + time.Millisecond - 1).Milliseconds()
	if p.Headers == nil {
		p.Headers = amqp.Table{}
	}
	p.Headers[HeaderDelay] = ms
	return nil
}

// session returns the open session, connecting first when there is none
// or it broke, and makes sure every exchange of out exists (declaring it
// with declare_exchange), within timeout.
func (s *Sink) session(ctx context.Context, msgs []*message.Message, out []outgoing) (*session, error) {
	s.sessMu.Lock()
	sess, closed := s.sess, s.closed
	s.sessMu.Unlock()
	if closed {
		return nil, publish.Permanent(fmt.Errorf("rabbitmq: sink %s is closed", s.name))
	}
	if sess != nil && sess.broken() {
		s.drop(sess)
		sess = nil
	}
	if sess == nil {
		var err error
		sess, err = s.dialer.dial(ctx)
		if err != nil {
			return nil, s.failure(ctx, err, fmt.Sprintf("rabbitmq: connecting to %s for %s", redact.URL(s.dialer.url), publish.DescribeCall(msgs)))
		}
		s.log.Debug().Str("url", redact.URL(s.dialer.url)).Msg("rabbitmq sink connected")
		s.sessMu.Lock()
		if s.closed {
			s.sessMu.Unlock()
			sess.close()
			return nil, publish.Permanent(fmt.Errorf("rabbitmq: sink %s is closed", s.name))
		}
		s.sess = sess
		s.sessMu.Unlock()
	}
	if err := s.exchanges(ctx, sess, msgs, out); err != nil {
		s.drop(sess)
		return nil, err
	}
	return sess, nil
}

// exchanges checks (or declares) each exchange of out the session has not
// seen yet, in the order of first use.
func (s *Sink) exchanges(ctx context.Context, sess *session, msgs []*message.Message, out []outgoing) error {
	first := slices.IndexFunc(out, func(o outgoing) bool { return !sess.known[o.exchange] })
	if first < 0 {
		return nil
	}
	// The client's declarations do not take a context: end them by
	// closing the socket when ctx ends or timeout passes.
	tctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	stop := context.AfterFunc(tctx, sess.abort)
	defer stop() // runs before cancel, which would fire it
	for i := first; i < len(out); i++ {
		name := out[i].exchange
		if sess.known[name] {
			continue
		}
		if declared, err := s.exchange1(sess, name); err != nil {
			return s.exchangeFailed(ctx, err, publish.Describe(msgs[i]), name, declared)
		}
	}
	return nil
}

// exchange1 checks (or, with declare_exchange and a name it may declare,
// declares) the exchange name on sess and records it as known; declared
// reports which it did. The caller bounds it in time.
func (s *Sink) exchange1(sess *session, name string) (declared bool, err error) {
	declared = s.declare && s.mayDeclare(name)
	if declared {
		var args amqp.Table
		if s.exchangeType == DelayedExchangeType {
			args = amqp.Table{"x-delayed-type": s.delayedType}
		}
		err = sess.ch.ExchangeDeclare(name, s.exchangeType, true, false, false, false, args)
	} else {
		err = sess.ch.ExchangeDeclarePassive(name, s.exchangeType, true, false, false, false, nil)
	}
	if err != nil {
		return declared, err
	}
	if len(sess.known) >= maxKnownExchanges {
		clear(sess.known)
	}
	sess.known[name] = true
	return declared, nil
}

// mayDeclare reports whether declare_exchange may declare the exchange
// name: a fixed exchange always; an exchange from the template only when
// declare_exchanges allows it (by default the names that start with the
// template's leading text, none when the template starts with a
// placeholder). A message's type must not create an exchange of its
// choosing (docs/security.md).
func (s *Sink) mayDeclare(name string) bool {
	if fixedName(s.exchange) {
		return true
	}
	return s.declarable.allows(name)
}

// exchangeFailed turns the failed check or declaration of exchange name,
// first used by the message that about names (publish.Describe; "at
// start" for Start's check), into the error Publish returns. For an
// exchange the template chose from the message, the broker's refusal of
// that name (404 NOT_FOUND, 403 ACCESS_REFUSED, 406 PRECONDITION_FAILED)
// is a refusal of the message (publish.Rejected: relay.on_refused stops
// or parks it): other messages may go to other exchanges, and a name a
// message chose must never stop the relay for good. For a fixed exchange
// it is Permanent: every message would fail alike.
func (s *Sink) exchangeFailed(ctx context.Context, err error, about string, name string, declared bool) error {
	templated := !fixedName(s.exchange)
	if ctx.Err() == nil && templated && refusesName(err) {
		hint := "RabbitMQ refuses this exchange for this message's type or key"
		switch {
		case isNotFound(err) && s.declare:
			hint = "the exchange does not exist and declare_exchanges does not allow declaring it: create it, or add it to declare_exchanges"
		case isNotFound(err):
			hint = "the exchange does not exist: create it (durable, bound to the queues that should get the messages), or set declare_exchange: true"
		case declared:
			hint = "RabbitMQ refuses to declare it (an exchange of another type or durability, or a name the user may not configure)"
		}
		return publish.Rejected(fmt.Errorf("rabbitmq: %s: exchange %q in vhost %q from template %q: %w; %s; "+
			"or park the message with relay.on_refused: dead_letter", about, name, s.vhost, s.exchange.Text(), err, hint))
	}
	if !s.declare && isNotFound(err) {
		return publish.Permanent(fmt.Errorf("rabbitmq: %s: exchange %q does not exist in vhost %q: %w; "+
			"create it (durable, bound to the queues that should get the messages), or set declare_exchange: true",
			about, name, s.vhost, err))
	}
	what := "checking"
	if declared {
		what = "declaring"
	}
	var ae *amqp.Error
	if declared && s.exchangeType == DelayedExchangeType && errors.As(err, &ae) && ae.Code == amqp.CommandInvalid {
		return publish.Permanent(fmt.Errorf("rabbitmq: %s: declaring exchange %q of type %s: %w; the server lacks the delayed-message plugin: "+
			"run rabbitmq-plugins enable rabbitmq_delayed_message_exchange on it, or set another exchange_type and remove columns.deliver_at",
			about, name, DelayedExchangeType, s.scrub(err)))
	}
	return s.failure(ctx, err, fmt.Sprintf("rabbitmq: %s: %s exchange %q", about, what, name))
}

// send publishes out on the session's channel, at most maxInFlight
// unconfirmed, and waits for the confirms in order. It returns how many
// messages from the start of msgs RabbitMQ confirmed, and the first
// failure.
func (s *Sink) send(ctx context.Context, sess *session, msgs []*message.Message, out []outgoing) (int, error) {
	dcs := make([]*amqp.DeferredConfirmation, len(out))
	timer := time.NewTimer(s.timeout)
	defer timer.Stop()
	// A write blocks when RabbitMQ stops reading from the connection (it
	// blocks publishers during a memory or disk alarm): the watchdog
	// closes the socket when one write takes longer than timeout.
	var stalled atomic.Bool
	watchdog := time.AfterFunc(s.timeout, func() {
		stalled.Store(true)
		sess.abort()
	})
	defer watchdog.Stop()
	next := 0 // the first message not confirmed yet
	for i := range out {
		for i-next >= s.maxInFlight {
			if err := s.await(ctx, sess, timer, dcs[next], msgs[next], &out[next]); err != nil {
				return next, err
			}
			next++
		}
		o := &out[i]
		watchdog.Reset(s.timeout)
		dc, err := sess.ch.PublishWithDeferredConfirm(o.exchange, o.key, true, false, o.pub)
		if err != nil {
			if stalled.Load() && ctx.Err() == nil {
				return next, s.timedOut(sess, msgs[i], o, "sending it took longer than timeout")
			}
			return next, s.publishFailure(ctx, s.closedErr(sess, err), msgs[i], o)
		}
		dcs[i] = dc
		if i == next {
			timer.Reset(s.timeout) // the wait for a confirm starts with its publish
		}
	}
	watchdog.Stop() // the confirms have their own timer
	for ; next < len(out); next++ {
		if err := s.await(ctx, sess, timer, dcs[next], msgs[next], &out[next]); err != nil {
			return next, err
		}
	}
	return len(out), nil
}

// await waits for the confirm of m (published as o), at most timeout
// after the previous confirm (or its publish), and checks that it was not
// returned.
func (s *Sink) await(ctx context.Context, sess *session, timer *time.Timer, dc *amqp.DeferredConfirmation, m *message.Message, o *outgoing) error {
	select {
	case <-dc.Done():
	case <-ctx.Done():
		return fmt.Errorf("%s: waiting for the confirm: %w", s.about(m, o), ctx.Err())
	case <-timer.C:
		sess.abort()
		return s.timedOut(sess, m, o, "no confirm within timeout")
	}
	timer.Reset(s.timeout)
	if !dc.Acked() {
		if sess.ch.IsClosed() {
			return s.publishFailure(ctx, s.closedErr(sess, amqp.ErrClosed), m, o)
		}
		return fmt.Errorf("%s: %w (a queue refused it: a full queue with x-overflow: reject-publish, or a queue failure); it is sent again",
			s.about(m, o), errNack)
	}
	if r, ok := sess.returned(m.ID, o); ok {
		return s.unroutable(m, o, r)
	}
	return nil
}

// unroutable is the error for m, published as o, that RabbitMQ returned.
// When the exchange or the routing key comes from a template that depends
// on the message, another message may well be routed: the error is
// Rejected, so that relay.on_refused decides. With a fixed exchange and
// routing key every message goes the same way and would come back too:
// the binding is missing, and parking every message would hide that, so
// the error is Permanent.
func (s *Sink) unroutable(m *message.Message, o *outgoing, r amqp.Return) error {
	err := fmt.Errorf("%s: unroutable, RabbitMQ returned it (%d %s): no queue is bound to exchange %q for routing key %q; "+
		"bind a queue", s.about(m, o), r.ReplyCode, r.ReplyText, o.exchange, o.key)
	if fixedName(s.exchange) && fixedName(s.routingKey) {
		return publish.Permanent(fmt.Errorf("%w (every message goes to this exchange with this routing key: parking them would not help)", err))
	}
	return publish.Rejected(fmt.Errorf("%w, or park the message with relay.on_refused: dead_letter", err))
}

// timedOut is the error for a message that made no progress within
// timeout (what says how), naming the alarm when RabbitMQ blocks the
// connection.
func (s *Sink) timedOut(sess *session, m *message.Message, o *outgoing, what string) error {
	msg := fmt.Sprintf("%s: %s %s", s.about(m, o), what, s.timeout)
	if reason := sess.blockedBy(); reason != "" {
		msg += fmt.Sprintf(" (RabbitMQ blocks the connection: %q, a memory or disk alarm)", reason)
	}
	return fmt.Errorf("%s: %w", msg, errNoConfirm)
}

var (
	// errNack is wrapped by the error for a message RabbitMQ nacked.
	errNack = errors.New("rabbitmq: nacked by the server")
	// errNoConfirm is wrapped by the error for a confirm that did not come
	// within timeout.
	errNoConfirm = errors.New("rabbitmq: no publisher confirm")
)

// returned reports whether RabbitMQ returned the message with id published
// as o. Returns come in publish order, each before the ack of its message,
// so once that ack arrived its return, if any, is in the buffer.
func (sess *session) returned(id string, o *outgoing) (amqp.Return, bool) {
	for more := true; more; {
		select {
		case r, ok := <-sess.returns:
			if !ok {
				more = false
				break
			}
			sess.pending = append(sess.pending, r)
		default:
			more = false
		}
	}
	if len(sess.pending) > 0 {
		r := sess.pending[0]
		if r.MessageId == id && r.Exchange == o.exchange && r.RoutingKey == o.key {
			sess.pending = sess.pending[1:]
			return r, true
		}
	}
	return amqp.Return{}, false
}

// about names a message and where it went, for errors.
func (s *Sink) about(m *message.Message, o *outgoing) string {
	return fmt.Sprintf("rabbitmq: %s to exchange %q with routing key %q", publish.Describe(m), o.exchange, o.key)
}

// closedErr returns err, or the server's reason for closing the channel
// when there is one (a channel or connection exception) and err is the
// client's bare amqp.ErrClosed.
func (s *Sink) closedErr(sess *session, err error) error {
	if errors.Is(err, amqp.ErrClosed) {
		if reason := sess.closeReason(); reason != nil {
			return reason
		}
	}
	return err
}

// failure turns err into the error to return: prefixed with what, marked
// Permanent (with a hint) when classify says no retry helps, wrapping
// ctx.Err() when ctx ended.
func (s *Sink) failure(ctx context.Context, err error, what string) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%s: %w (%w)", what, ctxErr, err)
	}
	v := classify(err)
	if !v.permanent {
		return fmt.Errorf("%s: %w", what, err)
	}
	return publish.Permanent(fmt.Errorf("%s: %w; %s", what, err, v.hint))
}

// publishFailure is failure for m, published as o, except that RabbitMQ
// closing the channel with 406 PRECONDITION_FAILED over the publish is
// that message's refusal (publish.Rejected: relay.on_refused decides, and
// the runner tries it alone first): RabbitMQ answers so to a property of
// the message (an expiration or x-delay it does not take, a body over
// max_message_size), and the next message may well go through. A
// message in flight behind it on the same channel is sent again.
func (s *Sink) publishFailure(ctx context.Context, err error, m *message.Message, o *outgoing) error {
	var ae *amqp.Error
	if ctx.Err() == nil && errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
		return publish.Rejected(fmt.Errorf("%s: RabbitMQ refused the message: %w (a property it does not take: an expiration or x-delay over %v, "+
			"or a body over the server's max_message_size); park it with relay.on_refused: dead_letter, or fix the row", s.about(m, o), err, MaxExpiry))
	}
	return s.failure(ctx, err, s.about(m, o))
}

// drop forgets sess and closes it in the background (a graceful close
// waits up to a second for the server).
func (s *Sink) drop(sess *session) {
	s.sessMu.Lock()
	if s.sess == sess {
		s.sess = nil
	}
	s.sessMu.Unlock()
	go sess.close()
}

// scrub hides the URL's password should an error text from the client or
// the server hold it (none is known to; this is the second line of
// defence, see internal/redact).
func (s *Sink) scrub(err error) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	if red := s.secrets.Redact(text); red != text {
		return &scrubbed{text: red, err: err}
	}
	return err
}

// scrubbed is an error whose text was redacted; it still unwraps to the
// original, so that publish.IsPermanent and publish.DoneOf see its marks.
type scrubbed struct {
	text string
	err  error
}

func (e *scrubbed) Error() string { return e.text }
func (e *scrubbed) Unwrap() error { return e.err }

// Close closes the connection. A Publish running meanwhile fails. It is
// safe to call more than once.
func (s *Sink) Close() error {
	s.sessMu.Lock()
	sess := s.sess
	s.sess, s.closed = nil, true
	s.sessMu.Unlock()
	if sess != nil {
		sess.close()
	}
	return nil
}

// MaxMessageBytes returns max_message_bytes (publish.Limited: a claim
// check's default threshold).
func (s *Sink) MaxMessageBytes() int { return s.maxBytes }
