package webhook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/internal/backoff"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/envelope"
	"github.com/walpost/walpost/internal/redact"
)

func init() {
	publish.Register("webhook", publish.FactoryOf(New))
}

// Headers the sink sets (besides Content-Type and the ce- headers of
// format: cloudevents).
const (
	// headerID is the message id: the header inbox.HTTPHandler reads.
	headerID = inbox.DefaultIDHeader
	// headerType is the message type (format: raw).
	headerType = "X-Message-Type"
	// headerKey is the ordering key, absent for a NULL key (format: raw).
	headerKey = "X-Message-Key"
	// headerCount is the number of messages in a request of mode batch.
	headerCount = "X-Message-Count"
	// headerIdempotencyKey is the outbox id (mode message) or a digest
	// of the batch's ids (mode batch).
	headerIdempotencyKey = "Idempotency-Key"
	// headerSignature signs the request when secret: is set.
	headerSignature = inbox.SignatureHeader
)

const (
	// userAgent is sent unless headers: sets User-Agent.
	userAgent = "walpost"
	// snippetBytes is how much of an error answer's body an error quotes.
	snippetBytes = 256
	// drainBytes is how much of an answer's body is read to reuse the
	// connection; a longer body closes it.
	drainBytes = 64 << 10
)

// Sink posts outbox messages to an HTTP endpoint (see the package doc).
//
// Publish calls are serialized by the sink (a second caller waits for
// the first). Within a call, requests go out one at a time in WAL order
// (concurrency 1), or up to concurrency at once, one at a time per
// ordering key (lanes.go). Name and Close are safe to call from any
// goroutine. Publish is not called after Close.
type Sink struct {
	name          string
	log           zerolog.Logger
	url           string // the endpoint, never logged: it may hold a token
	endpoint      string // scheme://host[:port], for logs and errors
	mode          string
	env           envelope.Settings
	static        http.Header // headers:, canonical keys
	secret        []byte
	signV1        bool // also sign with the old scheme v1 (signature_v1)
	timeout       time.Duration
	maxRetryAfter time.Duration
	batchSize     int
	batchBytes    int
	concurrency   int
	secrets       *redact.Set // cut out of answers quoted in errors

	transport *http.Transport
	client    *http.Client

	mu       sync.Mutex // serializes Publish; guards lanes
	bodyHint int        // the size of the last body of mode batch (guarded by the call's schedule)
	lanes    []lane     // one per request in flight at once

	// now is the clock of signatures and Retry-After dates; tests set it.
	now func() time.Time

	closeOnce sync.Once
}

var _ publish.Sink = (*Sink)(nil)

// New builds a webhook sink from its configuration: it decodes the
// kind's settings strictly, fills in defaults, validates them (errors
// name the field, e.g. "url: empty", and never repeat the URL, secret or
// a header's value) and loads the TLS files. It does not connect: the
// first Publish does, and an endpoint that is down then is a transient
// error, not a failed start.
func New(cfg *config.Sink, log zerolog.Logger) (publish.Sink, error) {
	var wc webhookConfig
	if err := publish.DecodeSettings(cfg, &wc); err != nil {
		return nil, err
	}
	return open(cfg.Name, wc, log)
}

// open builds the sink from validated settings.
func open(name string, wc webhookConfig, log zerolog.Logger) (*Sink, error) {
	u, err := parseURL(wc.URL)
	if err != nil {
		return nil, err
	}
	// timeout bounds each request as a whole through its context (send),
	// from dialing to the end of the answer's body. Every lane keeps its
	// connection between requests (HTTP/1.1; HTTP/2 multiplexes them on
	// one).
	dialer := &net.Dialer{KeepAlive: 30 * time.Second}
	idle := max(2, *wc.Concurrency)
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dialer.DialContext,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        idle,
		MaxIdleConnsPerHost: idle,
		IdleConnTimeout:     90 * time.Second,
	}
	if u.Scheme == "https" {
		if tr.TLSClientConfig, err = wc.TLS.Build(); err != nil {
			return nil, err
		}
	}
	s := &Sink{
		name:          name,
		log:           log,
		url:           wc.URL,
		endpoint:      u.Scheme + "://" + u.Host,
		mode:          wc.Mode,
		env:           wc.Settings,
		static:        make(http.Header, len(wc.Headers)),
		secret:        []byte(wc.Secret),
		signV1:        *wc.SignatureV1,
		timeout:       wc.Timeout.D(),
		maxRetryAfter: wc.MaxRetryAfter.D(),
		batchSize:     wc.BatchSize,
		batchBytes:    wc.BatchBytes,
		concurrency:   *wc.Concurrency,
		lanes:         make([]lane, *wc.Concurrency),
		transport:     tr,
		client: &http.Client{
			Transport: tr,
			// A redirected POST would go out again as a GET without its
			// body (301, 302, 303), and credentials could follow it to
			// another host: a 3xx is an answer, classified as permanent.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		now: time.Now,
	}
	for k, v := range wc.Headers {
		s.static.Set(k, v)
	}
	s.secrets = secretsOf(u, wc)
	s.warn(u, wc)
	log.Info().Str("endpoint", s.endpoint).Str("mode", wc.Mode).Str("format", wc.Format).
		Bool("signed", wc.Secret != "").Int("headers", len(wc.Headers)).Int("concurrency", s.concurrency).
		Msg("webhook sink configured")
	return s, nil
}

// secretsOf returns what an answer's body may echo of the sink's
// credentials: the values of headers: (and, for "<scheme> <credentials>"
// such as "Bearer …", the credentials alone), the signing secret, the
// URL's user, password and their Basic authentication form, its path and
// its query (as sent and decoded). redact.Set also finds their escaped
// forms (JSON, Go-quoted, percent-encoded).
func secretsOf(u *url.URL, wc webhookConfig) *redact.Set {
	var v []string
	for _, h := range wc.Headers {
		v = append(v, h)
		if _, cred, ok := strings.Cut(strings.TrimSpace(h), " "); ok {
			v = append(v, strings.TrimSpace(cred))
		}
	}
	v = append(v, wc.Secret)
	if u.User != nil {
		p, _ := u.User.Password()
		v = append(v, u.User.Username(), p,
			base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+p)))
	}
	if len(u.EscapedPath()) > 1 {
		v = append(v, u.EscapedPath(), u.Path)
	}
	if u.RawQuery != "" {
		v = append(v, u.RawQuery)
		for _, vals := range u.Query() {
			v = append(v, vals...)
		}
	}
	return redact.NewSet(v...)
}

// warn logs the settings that weaken the relay's guarantees or expose
// credentials.
func (s *Sink) warn(u *url.URL, wc webhookConfig) {
	if wc.TLS.InsecureSkipVerify {
		s.log.Warn().Msg("webhook sink with tls.insecure_skip_verify: the server's certificate is not verified, " +
			"so a man-in-the-middle can read and alter messages (and credentials); set tls.ca_file instead")
	}
	if u.Scheme == "http" && (u.User != nil || len(wc.Headers) > 0) {
		s.log.Warn().Msg("webhook sink with an http url: the credentials in url and the headers cross the network in clear text; use https")
	}
}

// Name returns the sink's configured name.
func (s *Sink) Name() string { return s.name }

// Close releases the idle connections. Publish is not called after it.
func (s *Sink) Close() error {
	s.closeOnce.Do(s.transport.CloseIdleConnections)
	return nil
}

// Publish posts msgs and returns nil only once every request was
// answered with a 2xx status.
//
// In mode message each message is one request; in mode batch the
// messages go out in requests of at most batch_size messages and
// batch_bytes of body. With concurrency 1 the requests go out one at a
// time, in WAL order, each only after the one before it was answered
// 2xx, and the first failure ends the call. With concurrency N up to N
// requests are in flight at once, never two of one ordering key, and
// each key's messages go in WAL order, each request only after the key's
// previous one was answered 2xx; a failed request stops its keys for the
// rest of the call, and the other keys go on (lanes.go). On failure
// Publish returns the worst error (Permanent, then Rejected, then
// transient; of equal rank the earliest in the WAL), marked with
// publish.Partial for the messages of the requests answered 2xx: per key
// a prefix of its messages, so that the retry sends each key's remainder
// in order. Permanent or Rejected as classifyStatus and classifyError
// decide. A 429 or 503 answer's Retry-After is waited out by its lane
// (at most max_retry_after) before Publish returns. When ctx ends
// Publish returns at once with an error wrapping ctx.Err().
//
// Every error names the message (id and LSN) or request it concerns and
// the endpoint (scheme and host only).
func (s *Sink) Publish(ctx context.Context, msgs []*message.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(msgs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("webhook: publishing %s: %w", publish.DescribeCall(msgs), err)
	}
	return s.publishLanes(ctx, msgs)
}

// batchHeader returns the headers of a request of mode batch holding msgs.
func (s *Sink) batchHeader(msgs []*message.Message) http.Header {
	h := s.baseHeader(len(s.static) + 5)
	h["Content-Type"] = []string{"application/json"}
	h[headerCount] = []string{strconv.Itoa(len(msgs))}
	h[headerIdempotencyKey] = []string{batchKey(msgs)}
	return h
}

// batchKey is a batch's Idempotency-Key: the lower-case hex SHA-256 of
// its messages' ids, each followed by a newline. A retry of the same
// messages carries the same key; any other set of messages another.
func batchKey(msgs []*message.Message) string {
	d := sha256.New()
	for _, m := range msgs {
		io.WriteString(d, m.ID)
		d.Write([]byte{'\n'})
	}
	return hex.EncodeToString(d.Sum(nil))
}

// baseHeader returns a new header holding headers: and the User-Agent.
func (s *Sink) baseHeader(size int) http.Header {
	h := make(http.Header, size)
	h["User-Agent"] = []string{userAgent}
	for k, v := range s.static {
		h[k] = v
	}
	return h
}

// messageHeader returns the headers of m's request in mode message: the
// headers column (entries the sink or headers: set are left out, and
// every walpost-* one), then headers:, then the relay's own
// (message.RelayHeaders), then the sink's own. An id, type (format raw), key or entry of
// the headers column that cannot be an HTTP header is a refusal of m
// (Rejected): net/http would refuse the request, and retrying would not
// change that.
func (s *Sink) messageHeader(m *message.Message) (http.Header, error) {
	if !validValue(m.ID) {
		return nil, publish.Rejected(fmt.Errorf("webhook: message %q (lsn %s): its id holds a control character, "+
			"which an HTTP header (Idempotency-Key, %s) cannot carry", m.ID, m.LSN, headerID))
	}
	h := s.baseHeader(len(s.static) + len(m.Headers) + 8)
	if len(m.Headers) > 0 {
		keys := make([]string, 0, len(m.Headers))
		for k := range m.Headers {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !validName(k) || !validValue(m.Headers[k]) {
				return nil, publish.Rejected(fmt.Errorf("webhook: %s: headers column entry %q: "+
					"not an HTTP header name, or its value holds a control character", publish.Describe(m), k))
			}
			ck := http.CanonicalHeaderKey(k)
			if !publish.KeepRowHeader(k) {
				continue
			}
			if isReserved(ck) || s.static[ck] != nil || ck == "User-Agent" {
				publish.LeaveOutRowHeader(k, publish.OwnRowHeader)
				continue
			}
			h[ck] = append(h[ck], m.Headers[k])
		}
	}
	for _, rh := range m.RelayHeaders() {
		h[http.CanonicalHeaderKey(rh.Name)] = []string{rh.Value}
	}
	h["Content-Type"] = []string{envelope.ContentType(m)}
	h[headerIdempotencyKey] = []string{m.ID}
	h[headerID] = []string{m.ID}
	if s.env.IsCloudEvents() {
		for _, a := range s.env.Attributes(m) {
			h["Ce-"+ceName(a.Name)] = []string{ceEncode(a.Value)}
		}
		if m.HasKey {
			h["Ce-Partitionkey"] = []string{ceEncode(m.Key)}
		}
		return h, nil
	}
	if !validValue(m.Type) {
		return nil, publish.Rejected(fmt.Errorf("webhook: %s: its type %q holds a control character, "+
			"which an HTTP header (%s) cannot carry", publish.Describe(m), m.Type, headerType))
	}
	h[headerType] = []string{m.Type}
	if m.HasKey {
		if !validValue(m.Key) {
			return nil, publish.Rejected(fmt.Errorf("webhook: %s: its key holds a control character, "+
				"which an HTTP header cannot carry", publish.Describe(m)))
		}
		h[headerKey] = []string{m.Key}
	}
	return h, nil
}

// ceName returns the canonical header key of CloudEvents attribute name
// (lower-case letters and digits): "specversion" → "Specversion".
func ceName(name string) string {
	if name == "" {
		return name
	}
	return string(name[0]-'a'+'A') + name[1:]
}

// ceEncode percent-encodes a CloudEvents attribute value for an HTTP
// header, as the CloudEvents HTTP binding requires: space, double quote,
// percent and every byte outside printable ASCII.
func ceEncode(v string) string {
	clean := true
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c > '~' || c == '"' || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return v
	}
	const hexUpper = "0123456789ABCDEF"
	b := make([]byte, 0, len(v)+16)
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c > '~' || c == '"' || c == '%' {
			b = append(b, '%', hexUpper[c>>4], hexUpper[c&0xF])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

// sign returns the signature header of a request with headers h and
// body: scheme v2 over every header derived from the message (all of h
// but the configured headers: and User-Agent, which are the endpoint's
// and may be rewritten by a gateway), and, with signature_v1, the old
// scheme's v1 beside it (docs/security.md).
func (s *Sink) sign(h http.Header, body []byte) string {
	names := make([]string, 0, len(h))
	for k := range h {
		if k != "User-Agent" && s.static[k] == nil {
			names = append(names, k)
		}
	}
	now := s.now()
	sig := inbox.SignRequest(s.secret, now, h, names, body)
	if s.signV1 {
		v1 := inbox.Sign(s.secret, now, h.Get(headerIdempotencyKey), body)
		sig += v1[strings.IndexByte(v1, ','):]
	}
	return sig
}

// send posts one request holding msgs (in the body already) on lane ln
// and returns nil for a 2xx answer. The error of any other outcome names
// the request's messages and is marked Permanent or Rejected per
// classifyStatus and classifyError. It is safe to call from several
// lanes at once.
func (s *Sink) send(ctx context.Context, ln *lane, body []byte, h http.Header, msgs []*message.Message) error {
	if len(s.secret) > 0 {
		h[headerSignature] = []string{s.sign(h, body)}
	}
	rctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil { // the URL was checked: not expected
		return publish.Permanent(fmt.Errorf("webhook: %s: building the request to %s failed", s.describe(msgs), s.endpoint))
	}
	req.Header = h
	resp, err := s.client.Do(req)
	if err != nil {
		return s.failed(ctx, rctx, err, msgs)
	}
	// A body broken off after the status does not matter: a 2xx status
	// makes the messages durable, any other is an error already.
	snippet := s.readAnswer(resp, ln.head[:])
	out, hint := classifyStatus(resp.StatusCode)
	if out == delivered {
		return nil
	}
	ferr := fmt.Errorf("webhook: %s: %s answered %s%s", s.describe(msgs), s.endpoint, resp.Status, snippet)
	if hint != "" {
		ferr = fmt.Errorf("%w (%s)", ferr, hint)
	}
	switch out {
	case permanent:
		return publish.Permanent(ferr)
	case refused:
		return publish.Rejected(ferr)
	}
	if wait := min(retryAfter(resp.Header, s.now()), s.maxRetryAfter); wait > 0 {
		s.log.Info().Str("status", resp.Status).Dur("retry_after_ms", wait).Str("first_msg_id", msgs[0].ID).
			Msg("the endpoint asks to wait before the next attempt (Retry-After); waiting")
		if !backoff.Sleep(ctx, wait) {
			return fmt.Errorf("%w; waiting %s (Retry-After) ended: %w", ferr, wait, ctx.Err())
		}
	}
	return ferr
}

// readAnswer reads an answer's body, up to drainBytes so that the
// connection can carry the next request, and returns the start of it (read
// into head) as it goes into an error (": <quoted>", secrets replaced), or
// "" when empty or when the status is 2xx.
func (s *Sink) readAnswer(resp *http.Response, head []byte) string {
	defer resp.Body.Close()
	n, err := io.ReadFull(resp.Body, head)
	if err == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, drainBytes))
	}
	if n == 0 || (resp.StatusCode >= 200 && resp.StatusCode <= 299) {
		return ""
	}
	text := s.secrets.Redact(string(head[:n]))
	if len(text) > snippetBytes {
		text = text[:snippetBytes] + "…"
	}
	return fmt.Sprintf(": %q", text)
}

// failed returns the error of a request that got no answer: wrapping
// ctx.Err() when the caller's context ended, transient for a timeout of
// the request's own (rctx), and as classifyError says otherwise. The
// url.Error of net/http is unwrapped: its text holds the URL.
func (s *Sink) failed(ctx, rctx context.Context, err error, msgs []*message.Message) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	what := s.describe(msgs)
	if ctx.Err() != nil {
		return fmt.Errorf("webhook: %s: POST to %s: %w", what, s.endpoint, ctx.Err())
	}
	if rctx.Err() != nil {
		return fmt.Errorf("webhook: %s: POST to %s: no answer within timeout %s", what, s.endpoint, s.timeout)
	}
	out, hint := classifyError(err)
	ferr := fmt.Errorf("webhook: %s: POST to %s: %w", what, s.endpoint, err)
	if out == permanent {
		return publish.Permanent(fmt.Errorf("%w (%s)", ferr, hint))
	}
	return ferr
}

// describe names the messages of a request: "message <id> (lsn <lsn>)" or
// "request of <n> messages (first <id>, lsn <lsn>; last <id>)".
func (s *Sink) describe(msgs []*message.Message) string {
	if len(msgs) == 1 {
		return publish.Describe(msgs[0])
	}
	last := msgs[len(msgs)-1]
	return fmt.Sprintf("request of %d messages (first %s, lsn %s; last %s, lsn %s)",
		len(msgs), msgs[0].ID, msgs[0].LSN, last.ID, last.LSN)
}
