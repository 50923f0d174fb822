package awsbatch

import (
	"errors"

	"github.com/aws/smithy-go"

	"github.com/walpost/walpost/internal/publish"
)

// Verdict is how a failed request or batch entry is handled.
type Verdict struct {
	// Permanent: retrying cannot help; the relay stops (publish.Permanent).
	Permanent bool
	// Refused: the service refuses the message itself (its size, an
	// attribute, its characters); other messages would go through
	// (publish.Rejected, relay.on_refused).
	Refused bool
	// Hint tells the operator what to do; "" for none.
	Hint string
}

// ClassifyCode decides how an error code is handled by codes, a
// service's table; senderFault says whether the service blamed the
// request (an entry's SenderFault, a 4xx). A code not in the table is
// permanent when the sender is at fault, transient otherwise.
func ClassifyCode(codes map[string]Verdict, code string, senderFault bool) Verdict {
	if v, ok := codes[code]; ok {
		return v
	}
	return Verdict{Permanent: senderFault}
}

// Classify decides whether err, from the SDK, is worth retrying. It looks
// at the API error's code and fault only, never at the text: an
// smithy.APIError is classified by ClassifyCode (a fault the server's is
// transient), everything else — network errors, ended contexts, the
// SDK's exhausted retries of those, credentials the chain could not get
// — is transient. Retrying a batch is always safe (duplicates, never
// reordering), so when in doubt the relay retries.
func Classify(codes map[string]Verdict, err error) Verdict {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ClassifyCode(codes, ae.ErrorCode(), ae.ErrorFault() == smithy.FaultClient)
	}
	return Verdict{}
}

// Mark marks err per v: Rejected, Permanent, or left transient.
func (v Verdict) Mark(err error) error {
	switch {
	case v.Refused:
		return publish.Rejected(err)
	case v.Permanent:
		return publish.Permanent(err)
	}
	return err
}
