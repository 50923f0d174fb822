package sns

import (
	"github.com/walpost/walpost/internal/publish/awsbatch"
)

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
var codeVerdicts = map[string]awsbatch.Verdict{
	"NotFound":                     {Permanent: true, Hint: hintNotFound},
	"AuthorizationError":           {Permanent: true, Hint: hintDenied},
	"InvalidSecurity":              {Permanent: true, Hint: hintDenied},
	"InvalidClientTokenId":         {Permanent: true, Hint: hintCredentials},
	"SignatureDoesNotMatch":        {Permanent: true, Hint: hintCredentials},
	"ExpiredToken":                 {Hint: hintCredentials},
	"KMSAccessDenied":              {Permanent: true, Hint: hintKMS},
	"KMSDisabled":                  {Permanent: true, Hint: hintKMS},
	"KMSInvalidState":              {Permanent: true, Hint: hintKMS},
	"KMSNotFound":                  {Permanent: true, Hint: hintKMS},
	"KMSOptInRequired":             {Permanent: true, Hint: hintKMS},
	"BatchRequestTooLong":          {Permanent: true, Hint: hintBatchTooLong},
	"TooManyEntriesInBatchRequest": {Permanent: true},
	"BatchEntryIdsNotDistinct":     {Permanent: true},
	"InvalidParameter":             {Permanent: true, Refused: true, Hint: hintContent},
	"ParameterValueInvalid":        {Permanent: true, Refused: true, Hint: hintContent},
	"InvalidParameterValue":        {Permanent: true, Refused: true, Hint: hintContent},
	"ValidationException":          {Permanent: true, Refused: true, Hint: hintContent},
	"Throttled":                    {Hint: hintThrottled},
	"Throttling":                   {Hint: hintThrottled},
	"KMSThrottling":                {Hint: hintThrottled},
	"InternalError":                {},
	"InternalFailure":              {},
	"ServiceUnavailable":           {},
}
