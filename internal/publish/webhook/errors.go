package webhook

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/walpost/walpost/internal/publish/tlsconf"
)

// outcome is how the sink handles an answer or a failed request.
type outcome int

const (
	// delivered: 2xx, the request's messages are durable.
	delivered outcome = iota
	// transient: retrying may help (5xx, 408, 425, 429, network errors,
	// timeouts); Publish returns a plain error and the relay retries.
	transient
	// permanent: the endpoint, credentials or configuration must change
	// (3xx, 401, 403, 404, 405, 407, 410, 421, 426, 428, TLS failures);
	// Publish marks the error with publish.Permanent and the relay stops.
	permanent
	// refused: the receiver refuses the request's content (any other
	// 4xx: 400, 409, 413, 415, 422, ...); Publish marks the error with
	// publish.Rejected, so that relay.on_refused: dead_letter can find
	// the message (publishing one by one) and park it.
	refused
)

// classifyStatus decides what an HTTP status means for the request's
// messages, and returns a hint for the operator ("" for none). It looks
// at the status code only; a Retry-After header is read apart
// (retryAfter).
func classifyStatus(code int) (outcome, string) {
	switch {
	case code >= 200 && code <= 299:
		return delivered, ""
	case code >= 500:
		return transient, ""
	case code == http.StatusRequestTimeout, code == http.StatusTooEarly, code == http.StatusTooManyRequests:
		return transient, ""
	case code >= 300 && code <= 399:
		return permanent, "the endpoint redirects, and the sink does not follow redirects (a POST would lose its body): set url to the final address"
	case code == http.StatusUnauthorized, code == http.StatusForbidden, code == http.StatusProxyAuthRequired:
		return permanent, "the receiver refuses the sink's credentials: check headers, the user and password in url, tls.cert_file, and secret against the receiver's"
	case code == http.StatusPreconditionRequired:
		return permanent, "the receiver finds no message id in the request (inbox.HTTPHandler answers 428 then): " +
			"inbox.HTTPHandler takes mode: message, and its IDHeader must be a header the sink sends " +
			"(X-Message-Id, Idempotency-Key, or ce-id with format: cloudevents)"
	case code == http.StatusNotFound, code == http.StatusMethodNotAllowed, code == http.StatusGone,
		code == http.StatusMisdirectedRequest, code == http.StatusUpgradeRequired:
		return permanent, "the endpoint does not take POST requests at this address: check url"
	case code >= 400 && code <= 499:
		return refused, "the receiver refuses the request's content; park the message with relay.on_refused: dead_letter, or fix the receiver"
	}
	// 1xx as a final answer: not HTTP as the sink knows it.
	return permanent, "the server's answer is not a final HTTP status: check url"
}

// retryAfter reads a Retry-After header (delay-seconds or an HTTP date,
// RFC 9110 section 10.2.3) relative to now. It returns 0 when there is
// none or it cannot be read, or when it is in the past.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs > int64(24*time.Hour/time.Second) {
			return 24 * time.Hour // capped by max_retry_after anyway
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// classifyError decides whether a request that got no answer (err from
// http.Client.Do or from reading the answer) is worth retrying, by error
// type, never by text. TLS failures that only a configuration change
// fixes (a certificate that does not verify, a handshake the server
// refuses with an alert, a server that does not speak TLS) are permanent;
// every other error (refused, reset, timeouts, DNS) is transient.
// Retrying a request is always safe: duplicates, never reordering.
func classifyError(err error) (outcome, string) {
	switch tlsconf.Classify(err) {
	case tlsconf.Unverified:
		return permanent, "the server's certificate does not verify: check tls.ca_file and tls.server_name"
	case tlsconf.Refused:
		return permanent, "the server refused the TLS handshake: check tls.cert_file and tls.key_file"
	case tlsconf.NotTLS:
		return permanent, "the server does not speak TLS on this port: check url (http or https)"
	}
	return transient, ""
}
