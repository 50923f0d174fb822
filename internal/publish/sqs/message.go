package sqs

import (
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/walpost/walpost/internal/publish/awsbatch"
)

// Names of the message attributes the sink sets (docs/sinks/sqs.md,
// "Mapping"; the sns sink sets the same, awsbatch.Encode).
const (
	AttrID   = awsbatch.AttrID
	AttrType = awsbatch.AttrType
	AttrKey  = awsbatch.AttrKey
	// AttrBodyEncoding is set to BodyBase64 when the body is the payload
	// in standard base64, and to BodyEmpty when the payload is empty (the
	// body is then "-").
	AttrBodyEncoding = awsbatch.AttrBodyEncoding
	BodyBase64       = awsbatch.BodyBase64
	BodyEmpty        = awsbatch.BodyEmpty
)

// Payload returns the outbox payload of a received message: its body, or
// the body decoded per its body-encoding attribute. Receivers (and the
// tests) use it.
func Payload(body string, attrs map[string]types.MessageAttributeValue) ([]byte, error) {
	enc := ""
	if a, ok := attrs[AttrBodyEncoding]; ok && a.StringValue != nil {
		enc = *a.StringValue
	}
	return awsbatch.DecodeBody(body, enc)
}
