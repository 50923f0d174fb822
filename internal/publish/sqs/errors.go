package sqs

import (
	"github.com/walpost/walpost/internal/publish/awsbatch"
)

// Hints for the errors that need the operator.
const (
	hintNotFound     = "the queue does not exist: create it, or fix queue (and region, endpoint)"
	hintDenied       = "the credentials may not send to the queue: allow sqs:SendMessage and sqs:GetQueueUrl on it (and kms:GenerateDataKey, kms:Decrypt for an SSE-KMS queue)"
	hintCredentials  = "AWS refused the credentials: check what the default chain finds (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, the web identity token, the instance role)"
	hintTooLarge     = "the message is larger than the queue takes: park it with relay.on_refused: dead_letter, or raise the queue's MaximumMessageSize and max_message_bytes (up to 1 MiB)"
	hintBatchTooLong = "SQS refused a batch as too long: lower max_message_bytes to the queue's MaximumMessageSize"
	hintContent      = "SQS refused the message's body or attributes: park it with relay.on_refused: dead_letter, and fix what writes such rows"
	hintKMS          = "the queue's KMS key cannot be used (disabled, pending deletion, not allowed): fix the key or its policy"
	hintThrottled    = "SQS throttles the requests; the relay retries"
)

// codeVerdicts maps the error codes of SQS (of a whole request, or of one
// entry of SendMessageBatch) to their handling. Codes not listed are
// transient when the fault is the server's, and permanent when it is the
// sender's (see classifyCode).
var codeVerdicts = map[string]awsbatch.Verdict{
	// the queue, the credentials, the key
	"QueueDoesNotExist":                           {Permanent: true, Hint: hintNotFound},
	"AWS.SimpleQueueService.NonExistentQueue":     {Permanent: true, Hint: hintNotFound},
	"AccessDenied":                                {Permanent: true, Hint: hintDenied},
	"AccessDeniedException":                       {Permanent: true, Hint: hintDenied},
	"InvalidSecurity":                             {Permanent: true, Hint: hintDenied},
	"InvalidClientTokenId":                        {Permanent: true, Hint: hintCredentials},
	"UnrecognizedClientException":                 {Permanent: true, Hint: hintCredentials},
	"SignatureDoesNotMatch":                       {Permanent: true, Hint: hintCredentials},
	"IncompleteSignature":                         {Permanent: true, Hint: hintCredentials},
	"MissingAuthenticationToken":                  {Permanent: true, Hint: hintCredentials},
	"ExpiredToken":                                {Hint: hintCredentials}, // the chain refreshes it
	"KmsAccessDenied":                             {Permanent: true, Hint: hintKMS},
	"KmsDisabled":                                 {Permanent: true, Hint: hintKMS},
	"KmsInvalidKeyUsage":                          {Permanent: true, Hint: hintKMS},
	"KmsInvalidState":                             {Permanent: true, Hint: hintKMS},
	"KmsNotFound":                                 {Permanent: true, Hint: hintKMS},
	"KmsOptInRequired":                            {Permanent: true, Hint: hintKMS},
	"BatchRequestTooLong":                         {Permanent: true, Hint: hintBatchTooLong},
	"AWS.SimpleQueueService.BatchRequestTooLong":  {Permanent: true, Hint: hintBatchTooLong},
	"TooManyEntriesInBatchRequest":                {Permanent: true},
	"BatchEntryIdsNotDistinct":                    {Permanent: true},
	"AWS.SimpleQueueService.UnsupportedOperation": {Permanent: true},
	"UnsupportedOperation":                        {Permanent: true},
	"QueueDeletedRecently":                        {Hint: hintNotFound},
	// the message itself
	"InvalidMessageContents": {Permanent: true, Refused: true, Hint: hintContent},
	"InvalidAttributeName":   {Permanent: true, Refused: true, Hint: hintContent},
	"InvalidAttributeValue":  {Permanent: true, Refused: true, Hint: hintContent},
	"InvalidParameterValue":  {Permanent: true, Refused: true, Hint: hintContent},
	"MessageTooLong":         {Permanent: true, Refused: true, Hint: hintTooLarge},
	// the service: retried
	"RequestThrottled":                     {Hint: hintThrottled},
	"ThrottlingException":                  {Hint: hintThrottled},
	"KmsThrottled":                         {Hint: hintThrottled},
	"OverLimit":                            {Hint: hintThrottled},
	"InternalError":                        {},
	"InternalFailure":                      {},
	"ServiceUnavailable":                   {},
	"AWS.SimpleQueueService.InternalError": {},
}
