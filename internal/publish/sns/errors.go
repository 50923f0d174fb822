package sns

import (
	"errors"

	"github.com/aws/smithy-go"
)

type verdict struct {
	permanent bool
	refused   bool
	hint      string
}

const (
	hintNotFound     = "the topic does not exist: create it, or fix topic_arn (and region, endpoint)"
	hintDenied       = "the credentials may not publish to the topic: allow sns:Publish on it (and kms:GenerateDataKey, kms:Decrypt for an encrypted topic)"
	hintCredentials  = "AWS refused the credentials: check what the default chain finds"
	hintTooLarge     = "the message is larger than SNS takes (256 KiB with its attributes): park it with relay.on_refused: dead_letter"
	hintBatchTooLong = "SNS refused a batch as too long: lower max_message_bytes"
	hintContent      = "SNS refused the message's body or attributes: park it with relay.on_refused: dead_letter"
	hintKMS          = "the topic's KMS key cannot be used: fix the key or its policy"
	hintThrottled    = "SNS throttles the requests; the relay retries"
)

// codeVerdicts maps SNS error codes (of a request, or of one entry of
// PublishBatch) to their handling; codes not listed are transient when
// the fault is the server's and permanent when it is the sender's.
var codeVerdicts = map[string]verdict{
	"NotFound":                     {permanent: true, hint: hintNotFound},
	"AuthorizationError":           {permanent: true, hint: hintDenied},
	"InvalidSecurity":              {permanent: true, hint: hintDenied},
	"InvalidClientTokenId":         {permanent: true, hint: hintCredentials},
	"SignatureDoesNotMatch":        {permanent: true, hint: hintCredentials},
	"ExpiredToken":                 {hint: hintCredentials},
	"KMSAccessDenied":              {permanent: true, hint: hintKMS},
	"KMSDisabled":                  {permanent: true, hint: hintKMS},
	"KMSInvalidState":              {permanent: true, hint: hintKMS},
	"KMSNotFound":                  {permanent: true, hint: hintKMS},
	"KMSOptInRequired":             {permanent: true, hint: hintKMS},
	"BatchRequestTooLong":          {permanent: true, hint: hintBatchTooLong},
	"TooManyEntriesInBatchRequest": {permanent: true},
	"BatchEntryIdsNotDistinct":     {permanent: true},
	"InvalidParameter":             {permanent: true, refused: true, hint: hintContent},
	"ParameterValueInvalid":        {permanent: true, refused: true, hint: hintContent},
	"InvalidParameterValue":        {permanent: true, refused: true, hint: hintContent},
	"ValidationException":          {permanent: true, refused: true, hint: hintContent},
	"Throttled":                    {hint: hintThrottled},
	"Throttling":                   {hint: hintThrottled},
	"KMSThrottling":                {hint: hintThrottled},
	"InternalError":                {},
	"InternalFailure":              {},
	"ServiceUnavailable":           {},
}

func classifyCode(code string, senderFault bool) verdict {
	if v, ok := codeVerdicts[code]; ok {
		return v
	}
	return verdict{permanent: senderFault}
}

// classify decides whether err, from the SDK, is worth retrying, by its
// API error code and fault only; anything else is transient.
func classify(err error) verdict {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return classifyCode(ae.ErrorCode(), ae.ErrorFault() == smithy.FaultClient)
	}
	return verdict{}
}
