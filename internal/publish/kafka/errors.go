package kafka

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/walpost/walpost/internal/publish/tlsconf"
)

// errOverBatchBytes is wrapped, with kerr.MessageTooLarge, by the error
// for a message that alone is over batch_bytes (refused before sending).
var errOverBatchBytes = errors.New("kafka: message over batch_bytes")

// verdict is how a failed write is handled.
type verdict struct {
	// permanent: retrying cannot help; Publish marks the error with
	// publish.Permanent and the relay stops.
	permanent bool
	// hint tells the operator what to do; "" for none.
	hint string
	// rejected: permanent, and caused by the size of a message, not by
	// the topic, credentials or settings: Publish marks the error with
	// publish.Rejected, so that relay.on_refused: dead_letter can find
	// the message (publishing one by one) and park it.
	rejected bool
}

// permanentCodes are the Kafka error codes that no retry fixes: the
// message, the topic, the credentials or the configuration must change.
// UnknownTopicOrPartition is decided apart (it depends on
// auto_create_topics). Every other code, and every error that is not a
// Kafka error code, is transient.
var permanentCodes = map[*kerr.Error]string{
	kerr.MessageTooLarge:                    "the request is larger than the topic's max.message.bytes: keep batch_bytes below it, and raise it (or park the message with relay.on_refused: dead_letter) if one message alone is larger",
	kerr.RecordListTooLarge:                 "the batch is larger than the topic's segment size: lower batch_bytes or raise segment.bytes",
	kerr.InvalidTopicException:              "Kafka rejects the topic name: fix topic",
	kerr.TopicAuthorizationFailed:           "the principal may not write to the topic: grant it WRITE and DESCRIBE on the topic",
	kerr.ClusterAuthorizationFailed:         "the principal lacks a cluster permission: grant it on the cluster (IDEMPOTENT_WRITE on Kafka before 2.8 for the idempotent producer)",
	kerr.SaslAuthenticationFailed:           "the brokers reject the credentials: check sasl.mechanism, sasl.username and sasl.password",
	kerr.UnsupportedSaslMechanism:           "the brokers do not offer this SASL mechanism: change sasl.mechanism",
	kerr.IllegalSaslState:                   "SASL negotiation failed: check the sasl settings against the listener",
	kerr.InvalidRequiredAcks:                "the brokers reject the acks setting: change acks",
	kerr.UnsupportedCompressionType:         "the brokers do not accept this compression: change compression",
	kerr.UnsupportedForMessageFormat:        "the topic's message format cannot hold this record: upgrade the topic's message.format.version",
	kerr.InvalidRecord:                      "the brokers reject the record (a topic policy or validation)",
	kerr.InvalidTimestamp:                   "the record timestamp (the commit time) is outside the topic's message.timestamp.difference.max.ms",
	kerr.PolicyViolation:                    "a broker policy rejects the request",
	kerr.TransactionalIDAuthorizationFailed: "the principal lacks a transactional id permission: grant it WRITE and DESCRIBE on the transactional id",
	kerr.ProducerFenced:                     fenced,
	kerr.InvalidProducerEpoch:               fenced,
}

// fenced is the hint for a transactional producer that another took over.
const fenced = "another instance took over this sink's transactional id (exactly_once: the same slot and sink name; a standby, a fleet member " +
	"or a second process on the same configuration): this one stops, its open transaction is aborted, and the other goes on from the committed progress"

// classify decides whether err, from writing to Kafka, is worth retrying.
// It looks only at error types and codes, never at the text:
//
//   - the codes in permanentCodes (MESSAGE_TOO_LARGE also when the
//     client refuses a record over batch_bytes before sending it):
//     permanent;
//   - UnknownTopicOrPartition: permanent unless autoCreate (the brokers
//     may be creating the topic);
//   - a certificate the client cannot verify, a TLS alert from the broker
//     (it refused the client certificate) or a non-TLS answer on a TLS
//     connection: permanent, the TLS settings must change;
//   - everything else — retriable Kafka codes (leader changes, not
//     enough replicas, request timeouts), network errors, broker
//     connections refused or reset, context deadlines, unknown errors:
//     transient. The producer retries retriable codes itself, with the
//     same sequence numbers, until timeout; what reaches classify from
//     them is its record timeout (kgo.ErrRecordTimeout). Retrying a batch
//     is always safe (duplicates, never reordering), so when in doubt the
//     relay retries.
func classify(err error, autoCreate bool) verdict {
	if errors.Is(err, errOverBatchBytes) {
		return verdict{permanent: true, rejected: true,
			hint: "the message is larger than batch_bytes: raise batch_bytes (and the topic's max.message.bytes), or park it with relay.on_refused: dead_letter"}
	}
	var code *kerr.Error
	if errors.As(err, &code) {
		if code == kerr.UnknownTopicOrPartition {
			if autoCreate {
				return verdict{hint: "the topic does not exist yet; the brokers are asked to create it"}
			}
			return verdict{permanent: true, hint: "the topic does not exist: create it, or set auto_create_topics: true"}
		}
		if hint, ok := permanentCodes[code]; ok {
			return verdict{permanent: true, hint: hint, rejected: code == kerr.MessageTooLarge}
		}
		return verdict{}
	}
	switch f := tlsconf.Classify(err); f {
	case tlsconf.Unverified, tlsconf.Refused:
		return verdict{permanent: true, hint: tlsconf.Hint(f, "broker")}
	case tlsconf.NotTLS:
		return verdict{permanent: true, hint: tlsconf.Hint(f, "broker") + ": check tls.enabled and brokers"}
	}
	return verdict{}
}

// refusesTopic reports whether err is Kafka refusing a topic by its name:
// it does not exist (UnknownTopicOrPartition without auto_create_topics),
// the principal may not write to it (TopicAuthorizationFailed: ACLs are
// per topic name or prefix), or the name is invalid (InvalidTopic).
func refusesTopic(err error) bool {
	var code *kerr.Error
	return errors.As(err, &code) &&
		(code == kerr.UnknownTopicOrPartition || code == kerr.TopicAuthorizationFailed || code == kerr.InvalidTopicException)
}
