package sqs

import (
	"errors"

	"github.com/aws/smithy-go"

	"github.com/walpost/walpost/internal/publish"
)

// Verdict is how a failed request or batch entry is handled. The sns
// sink sorts its errors with it too, from a table of its own codes.
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
var codeVerdicts = map[string]Verdict{
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

func classifyCode(code string, senderFault bool) Verdict {
	return ClassifyCode(codeVerdicts, code, senderFault)
}

func classify(err error) Verdict { return Classify(codeVerdicts, err) }
