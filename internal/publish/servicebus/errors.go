package servicebus

import (
	"errors"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
)

// verdict is how a failed send is handled.
type verdict struct {
	// permanent: retrying cannot help; Publish marks the error with
	// publish.Permanent and the relay stops.
	permanent bool
	// hint tells the operator what to do; "" for none.
	hint string
}

// AMQP error conditions of Service Bus that go-amqp has no name for.
const (
	condServerBusy     amqp.ErrCond = "com.microsoft:server-busy"
	condTimeout        amqp.ErrCond = "com.microsoft:timeout"
	condEntityDisabled amqp.ErrCond = "com.microsoft:entity-disabled"
)

// Hints for the permanent errors.
const (
	hintTooLarge     = "the message is larger than the entity's max message size (256 KiB on Standard, up to 100 MB on Premium): park the message, or move to an entity that takes it"
	hintBatchTooBig  = "the service refused the batch as too large: lower max_batch_bytes, or set it to 0 to use the limit the entity advertises"
	hintNotFound     = "the entity does not exist: create the queue or topic, or fix queue/topic/entity"
	hintUnauthorized = "the credential may not send to the entity: give the identity the role Azure Service Bus Data Sender on it, or use a SAS policy with the Send right"
	hintDisabled     = "the entity is disabled (or send-disabled): enable it"
	hintNotAllowed   = "the service does not allow this send: a session-enabled entity needs sessions: true"
	hintFull         = "the entity is full (its max size) or a namespace quota is reached: receivers must catch up; the relay retries"
	hintNoCredential = "no Azure AD credential is available: set up workload identity, a managed identity or `az login`, or use connection_string"
	hintAADRefused   = "Azure AD refused the credential: check the identity (AZURE_CLIENT_ID, AZURE_TENANT_ID, the federated token or secret)"
)

// classify decides whether err, from the SDK, is worth retrying. It looks
// only at error types and codes, never at the text:
//
//   - ErrMessageTooLarge (from MessageBatch.AddMessage or a send) and the
//     AMQP condition amqp:link:message-size-exceeded: permanent;
//   - *azservicebus.Error with CodeNotFound or CodeUnauthorizedAccess, and
//     the AMQP conditions amqp:not-found, amqp:unauthorized-access,
//     amqp:not-allowed and com.microsoft:entity-disabled: permanent;
//   - azidentity's AuthenticationFailedError when Azure AD answered with a
//     4xx other than 408 and 429, and the other errors azidentity marks
//     non-retriable (no credential is available): permanent;
//   - everything else — CodeConnectionLost, CodeTimeout, CodeClosed,
//     com.microsoft:server-busy (throttling), com.microsoft:timeout,
//     amqp:resource-limit-exceeded (the entity is full), connection and
//     link errors, network errors, ended contexts, unknown errors:
//     transient. Retrying a batch is always safe (duplicates, never
//     reordering), so when in doubt the relay retries.
//
// *azservicebus.Error does not unwrap to the AMQP error under it, so both
// are checked: the SDK wraps some failures in it (after its own retries)
// and returns others as they came from go-amqp.
func classify(err error) verdict {
	if errors.Is(err, azservicebus.ErrMessageTooLarge) {
		return verdict{true, hintTooLarge}
	}
	var sbErr *azservicebus.Error
	if errors.As(err, &sbErr) {
		switch sbErr.Code {
		case azservicebus.CodeNotFound:
			return verdict{true, hintNotFound}
		case azservicebus.CodeUnauthorizedAccess:
			return verdict{true, hintUnauthorized}
		}
		return verdict{}
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Condition {
		case amqp.ErrCondMessageSizeExceeded:
			return verdict{true, hintBatchTooBig}
		case amqp.ErrCondNotFound:
			return verdict{true, hintNotFound}
		case amqp.ErrCondUnauthorizedAccess:
			return verdict{true, hintUnauthorized}
		case condEntityDisabled:
			return verdict{true, hintDisabled}
		case amqp.ErrCondNotAllowed:
			return verdict{true, hintNotAllowed}
		case amqp.ErrCondResourceLimitExceeded:
			return verdict{hint: hintFull}
		}
		return verdict{}
	}
	var authFailed *azidentity.AuthenticationFailedError
	if errors.As(err, &authFailed) {
		if r := authFailed.RawResponse; r != nil && r.StatusCode >= 400 && r.StatusCode < 500 &&
			r.StatusCode != http.StatusRequestTimeout && r.StatusCode != http.StatusTooManyRequests {
			return verdict{true, hintAADRefused}
		}
		return verdict{}
	}
	// azidentity marks the errors of a credential that cannot work here
	// (no managed identity endpoint, no az login, no federated token) with
	// the method NonRetriable; its type is unexported.
	var unavailable interface{ NonRetriable() }
	if errors.As(err, &unavailable) {
		return verdict{true, hintNoCredential}
	}
	return verdict{}
}
