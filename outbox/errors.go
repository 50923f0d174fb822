package outbox

import "errors"

var (
	// ErrInvalidTable means Writer.Table has an empty part or more than two
	// dot-separated parts.
	ErrInvalidTable = errors.New("outbox: invalid table name")
	// ErrInvalidColumns means Columns.ID, Columns.Type or Columns.Payload is
	// Omit: only the key and headers columns can be left out.
	ErrInvalidColumns = errors.New("outbox: invalid column mapping")
	// ErrNoType means a Message has an empty Type.
	ErrNoType = errors.New("outbox: message type is empty")
	// ErrNoPayload means a Message has a nil Payload. To store a JSON null,
	// pass json.RawMessage("null").
	ErrNoPayload = errors.New("outbox: message payload is nil")
	// ErrInvalidPayload means the payload is not valid JSON, or could not
	// be marshalled to JSON.
	ErrInvalidPayload = errors.New("outbox: message payload is not valid JSON")
	// ErrInvalidTraceparent means a traceparent is not in the W3C Trace
	// Context format version-traceid-parentid-flags.
	ErrInvalidTraceparent = errors.New("outbox: invalid traceparent")
	// ErrNoHeadersColumn means a message has headers but the Writer's
	// Columns.Headers is "-" (the table has no headers column).
	ErrNoHeadersColumn = errors.New("outbox: message has headers but the table has no headers column")
	// ErrNoKeyColumn means a message has a key but the Writer's Columns.Key
	// is "-" (the table has no key column).
	ErrNoKeyColumn = errors.New("outbox: message has a key but the table has no key column")
	// ErrNoTimeColumn means a message has DeliverAt or ExpiresAt set but
	// the Writer's Columns names no column for it.
	ErrNoTimeColumn = errors.New("outbox: message has a deliver_at or expires_at but the table has no such column")
)
