package natsjs

import (
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/walpost/walpost/internal/publish/tlsconf"
)

// verdict is how a failed publish is handled.
type verdict struct {
	// permanent: retrying cannot help; Publish marks the error with
	// publish.Permanent and the relay stops.
	permanent bool
	// rejected: permanent, and caused by the message itself (its size):
	// marked with publish.Rejected, so that relay.on_refused applies.
	rejected bool
	// reconnect: the connection may be unusable (an ack that never came,
	// a connection lost); the next Publish starts on a fresh one.
	reconnect bool
	// hint tells the operator what to do; "" for none.
	hint string
}

// JetStream API error codes the sink decides on (the server's
// errors.json). Codes not listed are decided by their status code.
const (
	codeInsufficientResources = 10023 // JSInsufficientResourcesErr
	codeStreamNotMatch        = 10060 // JSStreamNotMatchErr: Nats-Expected-Stream
	codeStreamStoreFailed     = 10077 // JSStreamStoreFailedF: limits with discard new, store errors
	codeMessageTTLDisabled    = 10166 // JSMessageTTLDisabledErr: Nats-TTL on a stream without allow_msg_ttl
	codeSchedulesDisabled     = 10188 // JSMessageSchedulesDisabledErr: a schedule on a stream without allow_msg_schedules
	codeScheduleTarget        = 10190 // JSMessageSchedulesTargetInvalidErr: the target is not in the schedule's stream
)

// apiVerdicts are the JetStream API errors a publish can get back, by
// error code.
var apiVerdicts = map[jetstream.ErrorCode]verdict{
	jetstream.JSErrCodeStreamMessageExceedsMaximum: {permanent: true, rejected: true,
		hint: "the message is larger than the stream's max_msg_size: raise it (nats stream edit --max-msg-size), or park the message with relay.on_refused: dead_letter"},
	jetstream.JSErrCodeJetStreamNotEnabled:           {permanent: true, hint: "JetStream is not enabled on the server: start it with -js (jetstream {} in its config)"},
	jetstream.JSErrCodeJetStreamNotEnabledForAccount: {permanent: true, hint: "JetStream is not enabled for the account: enable it in the account's config"},
	codeStreamNotMatch: {permanent: true,
		hint: "the subject belongs to another stream than stream.name: fix subject or stream.name, or the streams' subjects"},
	codeStreamStoreFailed: {permanent: true,
		hint: "the stream refused to store the message (a limit with discard: new, such as max_msgs, max_bytes or max_msgs_per_subject, or a storage error): raise the limit or let consumers catch up, then restart the relay"},
	codeInsufficientResources: {hint: "the server lacks resources for the stream (memory or disk); retrying"},
	codeMessageTTLDisabled: {permanent: true,
		hint: "the stream does not allow per-message TTL, which columns.expires_at maps to (Nats-TTL): enable it (nats stream edit --allow-msg-ttl), or remove columns.expires_at"},
	codeSchedulesDisabled: {permanent: true,
		hint: "the stream does not allow message schedules, which columns.deliver_at maps to: enable allow_msg_schedules on the stream that covers schedule_subject, or remove columns.deliver_at"},
	codeScheduleTarget: {permanent: true,
		hint: "the message's subject is not in the stream that holds schedule_subject: a schedule publishes only into its own stream; make one stream cover both"},
}

// classify decides whether err, from publishing one message, is worth
// retrying. It looks at error values, types and JetStream error codes,
// never at the text:
//
//   - a message over the server's max_payload (nats.ErrMaxPayload, checked
//     by the client) or the stream's max_msg_size (code 10054): rejected;
//   - no stream covers the subject (jetstream.ErrNoStreamResponse: the
//     server answered "no responders"): permanent (Publish then asks
//     JetStream whether a stream covers the subject, and retries when one
//     does, see noRespondersVerdict);
//   - bad credentials, a permissions violation, TLS settings that do not
//     work, JetStream not enabled, a store refusal (code 10077), the wrong
//     stream (10060), other API errors with a 4xx status: permanent;
//   - everything else (a connection refused or lost, an ack that did not
//     come, 5xx API errors, unknown errors): transient, with a fresh
//     connection for the retry when the connection may be at fault.
func classify(err error) verdict {
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return verdict{permanent: true, rejected: true,
			hint: "the message with its headers is larger than the server's max_payload (1 MiB by default): raise max_payload in the server's config, or park the message with relay.on_refused: dead_letter"}
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return verdict{permanent: true,
			hint: "no stream covers the subject: create one whose subjects include it (nats stream add --subjects 'outbox.>'), or set stream.name and stream.create: true to have the sink create it"}
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired),
		errors.Is(err, nats.ErrAuthRevoked), errors.Is(err, nats.ErrAccountAuthExpired):
		return verdict{permanent: true,
			hint: "the server refuses the credentials: check credentials_file, nkey_seed_file, token or user and password"}
	case errors.Is(err, nats.ErrPermissionViolation):
		return verdict{permanent: true,
			hint: "the user may not publish to the subject, or subscribe to its reply inbox (_INBOX.>): grant both in the server's permissions"}
	case errors.Is(err, nats.ErrBadHeaderMsg):
		return verdict{permanent: true, rejected: true, hint: "a header of the message cannot be sent in NATS headers"}
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		if v, ok := apiVerdicts[apiErr.ErrorCode]; ok {
			return v
		}
		if apiErr.Code >= 400 && apiErr.Code < 500 {
			return verdict{permanent: true, hint: "the server refuses the message for a reason retrying does not change"}
		}
		return verdict{}
	}
	if v, ok := tlsVerdict(err); ok {
		return v
	}
	return verdict{reconnect: true}
}

// noRespondersVerdict decides a "no responders" answer to a publish by
// the lookup of the stream that covers its subject (lookupErr, from
// StreamNameBySubject): none (jetstream.ErrStreamNotFound) is Permanent,
// or Rejected when streams take other subjects of the template (below);
// a stream found, or a lookup that failed, is transient, since a
// clustered stream answers no one while it elects a leader.
//
// A subject the template made from the row that no stream covers, while
// streams take other subjects of the template (templateCovered), is about
// the message, as a missing topic or queue is on the other sinks:
// rejected, so that relay.on_refused parks it or holds its key while the
// rest flows. A fixed subject, or a template no stream takes any subject
// of, is the configuration's: permanent, the relay stops.
func noRespondersVerdict(lookupErr error, templateCovered bool) verdict {
	if errors.Is(lookupErr, jetstream.ErrStreamNotFound) {
		if templateCovered {
			return verdict{permanent: true, rejected: true,
				hint: "no stream covers the subject the template made for this message: create a stream, or extend one, whose subjects include it, then resend it (cdc dead-letter resend); relay.on_refused applies meanwhile"}
		}
		return classify(jetstream.ErrNoStreamResponse)
	}
	return verdict{hint: "a stream covers the subject but did not answer (a clustered stream electing a leader); retrying"}
}

// tlsVerdict decides the TLS failures that only a configuration change
// fixes.
func tlsVerdict(err error) (verdict, bool) {
	switch {
	case errors.Is(err, nats.ErrSecureConnRequired):
		return verdict{permanent: true, hint: "the server requires TLS: set tls.enabled: true or use a tls:// server"}, true
	case errors.Is(err, nats.ErrSecureConnWanted):
		return verdict{permanent: true, hint: "the server does not offer TLS: check tls.enabled and servers"}, true
	}
	// A non-TLS answer (tlsconf.NotTLS) is left to the caller: transient,
	// on a fresh connection.
	switch f := tlsconf.Classify(err); f {
	case tlsconf.Unverified, tlsconf.Refused:
		return verdict{permanent: true, hint: tlsconf.Hint(f, "server")}, true
	}
	return verdict{}, false
}
