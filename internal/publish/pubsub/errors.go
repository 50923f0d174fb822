package pubsub

import (
	"errors"

	gps "cloud.google.com/go/pubsub/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// verdict is how a failed publish is handled.
type verdict struct {
	permanent bool // the relay stops (publish.Permanent)
	refused   bool // the message itself is refused (publish.Rejected)
	hint      string
}

const (
	hintNotFound    = "the topic does not exist: create it, or fix project and topic"
	hintDenied      = "the credentials may not publish to the topic: grant roles/pubsub.publisher on it"
	hintAuth        = "Google refused or could not find the credentials: check ADC (GOOGLE_APPLICATION_CREDENTIALS, workload identity, the metadata server)"
	hintInvalid     = "Pub/Sub refused the message (its size, attributes or ordering key): park it with relay.on_refused: dead_letter"
	hintTooLarge    = "the message is larger than Pub/Sub takes (10 MB with its attributes) or than batch_bytes: park it with relay.on_refused: dead_letter"
	hintPrecondtion = "the topic refuses publishing as set up (a schema the payload does not match, a message storage policy): fix the topic"
)

// classify sorts an error of a publish result by its kind and gRPC code,
// never its text: the client's ErrOversizedMessage and InvalidArgument
// refuse the message; NotFound, PermissionDenied, Unauthenticated and
// FailedPrecondition stop the relay; everything else — Unavailable,
// DeadlineExceeded, ResourceExhausted, Internal, Aborted, a key paused
// after an earlier failure (ErrPublishingPaused), network errors,
// ended contexts — is transient.
func classify(err error) verdict {
	if errors.Is(err, gps.ErrOversizedMessage) {
		return verdict{permanent: true, refused: true, hint: hintTooLarge}
	}
	if errors.As(err, &gps.ErrPublishingPaused{}) {
		return verdict{}
	}
	switch status.Code(err) {
	case codes.InvalidArgument:
		return verdict{permanent: true, refused: true, hint: hintInvalid}
	case codes.NotFound:
		return verdict{permanent: true, hint: hintNotFound}
	case codes.PermissionDenied:
		return verdict{permanent: true, hint: hintDenied}
	case codes.Unauthenticated:
		return verdict{permanent: true, hint: hintAuth}
	case codes.FailedPrecondition:
		return verdict{permanent: true, hint: hintPrecondtion}
	}
	return verdict{}
}
