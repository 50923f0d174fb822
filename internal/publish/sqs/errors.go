package sqs

import (
	"errors"

	"github.com/aws/smithy-go"
)

// verdict is how a failed request or batch entry is handled.
type verdict struct {
	// permanent: retrying cannot help; the relay stops (publish.Permanent).
	permanent bool
	// refused: SQS refuses the message itself (its size, an attribute,
	// its characters); other messages would go through
	// (publish.Rejected, relay.on_refused).
	refused bool
	// hint tells the operator what to do; "" for none.
	hint string
}

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
var codeVerdicts = map[string]verdict{
	// the queue, the credentials, the key
	"QueueDoesNotExist":                           {permanent: true, hint: hintNotFound},
	"AWS.SimpleQueueService.NonExistentQueue":     {permanent: true, hint: hintNotFound},
	"AccessDenied":                                {permanent: true, hint: hintDenied},
	"AccessDeniedException":                       {permanent: true, hint: hintDenied},
	"InvalidSecurity":                             {permanent: true, hint: hintDenied},
	"InvalidClientTokenId":                        {permanent: true, hint: hintCredentials},
	"UnrecognizedClientException":                 {permanent: true, hint: hintCredentials},
	"SignatureDoesNotMatch":                       {permanent: true, hint: hintCredentials},
	"IncompleteSignature":                         {permanent: true, hint: hintCredentials},
	"MissingAuthenticationToken":                  {permanent: true, hint: hintCredentials},
	"ExpiredToken":                                {hint: hintCredentials}, // the chain refreshes it
	"KmsAccessDenied":                             {permanent: true, hint: hintKMS},
	"KmsDisabled":                                 {permanent: true, hint: hintKMS},
	"KmsInvalidKeyUsage":                          {permanent: true, hint: hintKMS},
	"KmsInvalidState":                             {permanent: true, hint: hintKMS},
	"KmsNotFound":                                 {permanent: true, hint: hintKMS},
	"KmsOptInRequired":                            {permanent: true, hint: hintKMS},
	"BatchRequestTooLong":                         {permanent: true, hint: hintBatchTooLong},
	"AWS.SimpleQueueService.BatchRequestTooLong":  {permanent: true, hint: hintBatchTooLong},
	"TooManyEntriesInBatchRequest":                {permanent: true},
	"BatchEntryIdsNotDistinct":                    {permanent: true},
	"AWS.SimpleQueueService.UnsupportedOperation": {permanent: true},
	"UnsupportedOperation":                        {permanent: true},
	"QueueDeletedRecently":                        {hint: hintNotFound},
	// the message itself
	"InvalidMessageContents": {permanent: true, refused: true, hint: hintContent},
	"InvalidAttributeName":   {permanent: true, refused: true, hint: hintContent},
	"InvalidAttributeValue":  {permanent: true, refused: true, hint: hintContent},
	"InvalidParameterValue":  {permanent: true, refused: true, hint: hintContent},
	"MessageTooLong":         {permanent: true, refused: true, hint: hintTooLarge},
	// the service: retried
	"RequestThrottled":                     {hint: hintThrottled},
	"ThrottlingException":                  {hint: hintThrottled},
	"KmsThrottled":                         {hint: hintThrottled},
	"OverLimit":                            {hint: hintThrottled},
	"InternalError":                        {},
	"InternalFailure":                      {},
	"ServiceUnavailable":                   {},
	"AWS.SimpleQueueService.InternalError": {},
}

// classifyCode decides how an SQS error code is handled; senderFault says
// whether SQS blamed the request (an entry's SenderFault, a 4xx).
func classifyCode(code string, senderFault bool) verdict {
	if v, ok := codeVerdicts[code]; ok {
		return v
	}
	return verdict{permanent: senderFault}
}

// classify decides whether err, from the SDK, is worth retrying. It looks
// at the API error's code and fault only, never at the text: an
// smithy.APIError is classified by classifyCode (a fault the server's is
// transient), everything else — network errors, ended contexts, the
// SDK's exhausted retries of those, credentials the chain could not get
// — is transient. Retrying a batch is always safe (duplicates, never
// reordering), so when in doubt the relay retries.
func classify(err error) verdict {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return classifyCode(ae.ErrorCode(), ae.ErrorFault() == smithy.FaultClient)
	}
	return verdict{}
}
