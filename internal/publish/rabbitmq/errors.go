package rabbitmq

import (
	"errors"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walpost/walpost/internal/publish/tlsconf"
)

// verdict is how a failed connection, declaration or publish is handled.
type verdict struct {
	// permanent: retrying cannot help; Publish marks the error with
	// publish.Permanent and the relay stops.
	permanent bool
	// hint tells the operator what to do; "" for none.
	hint string
}

// permanentCodes are the AMQP reply codes, from a connection.close or a
// channel.close, that no retry fixes: the credentials, the permissions,
// the topology or the settings must change. NOT_FOUND (404) is decided by
// the caller, which knows the exchange. Every other code (320
// CONNECTION_FORCED from a broker shutting down, 506 RESOURCE_ERROR, 541
// INTERNAL_ERROR, frame errors) is transient.
var permanentCodes = map[int]string{
	amqp.AccessRefused:      "RabbitMQ refuses the credentials or a permission: check the user and password of url, and that the user may configure/write the exchange in this vhost",
	amqp.NotAllowed:         "RabbitMQ does not let the user use the vhost: check the vhost in url (its path; %2F for \"/\") and the user's permissions",
	amqp.PreconditionFailed: "RabbitMQ refuses a setting: an exchange declared with another type or durability (check exchange_type), or a message over the server's max_message_size (lower max_message_bytes to match it)",
	amqp.NotImplemented:     "RabbitMQ does not implement a method the sink uses (publisher confirms): use RabbitMQ 3.x or later",
}

// classify decides whether err, from connecting, declaring or publishing,
// is worth retrying. It looks only at error types and AMQP reply codes,
// never at the text:
//
//   - an *amqp.Error with a code in permanentCodes: permanent;
//   - amqp.ErrCredentials, amqp.ErrSASL, amqp.ErrVhost (the client's own
//     reading of a refused handshake): permanent;
//   - a certificate the client cannot verify, a TLS alert from the server
//     (it refused the client certificate) or a non-TLS answer on an
//     amqps:// connection: permanent, the TLS settings must change;
//   - everything else — connections refused or reset, a closed connection
//     or channel (amqp.ErrClosed), heartbeat timeouts, 320
//     CONNECTION_FORCED, 541 INTERNAL_ERROR, context deadlines: transient.
//     Retrying a batch is always safe (duplicates, never reordering, see
//     the package doc), so when in doubt the relay retries.
func classify(err error) verdict {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		if hint, ok := permanentCodes[ae.Code]; ok {
			return verdict{permanent: true, hint: hint}
		}
	}
	switch {
	case errors.Is(err, amqp.ErrCredentials):
		return verdict{permanent: true, hint: permanentCodes[amqp.AccessRefused]}
	case errors.Is(err, amqp.ErrSASL):
		return verdict{permanent: true, hint: "RabbitMQ offers no SASL mechanism the client supports (PLAIN, AMQPLAIN): enable PLAIN on the server"}
	case errors.Is(err, amqp.ErrVhost):
		return verdict{permanent: true, hint: permanentCodes[amqp.NotAllowed]}
	}
	switch f := tlsconf.Classify(err); f {
	case tlsconf.Unverified, tlsconf.Refused:
		return verdict{permanent: true, hint: tlsconf.Hint(f, "server")}
	case tlsconf.NotTLS:
		return verdict{permanent: true, hint: tlsconf.Hint(f, "server") + ": use amqp:// or the TLS port (5671)"}
	}
	return verdict{}
}

// isNotFound reports whether err is RabbitMQ's 404 NOT_FOUND: an exchange
// that does not exist.
func isNotFound(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.NotFound
}

// refusesName reports whether err is RabbitMQ refusing an exchange by its
// name: 404 NOT_FOUND (it does not exist), 403 ACCESS_REFUSED (the user
// may not configure or write it: permissions are patterns over names) or
// 406 PRECONDITION_FAILED (declared with another type or durability, or
// in the amq. namespace).
func refusesName(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && (ae.Code == amqp.NotFound || ae.Code == amqp.AccessRefused || ae.Code == amqp.PreconditionFailed)
}
