package outbox

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/walpost/walpost/internal/envsig"
)

// DefaultPrefix is the logical message prefix Emit uses unless told
// otherwise (Prefix): the default of the relay's postgres.message_prefix.
const DefaultPrefix = "walpost"

// Errors of Emit, besides those of Enqueue's validation (ErrNoType,
// ErrNoPayload, ErrInvalidPayload, ErrInvalidTraceparent).
var (
	// ErrInvalidPrefix means the prefix given with Prefix is empty or
	// holds a NUL byte.
	ErrInvalidPrefix = errors.New("outbox: invalid logical message prefix")
	// ErrInvalidID means Message.ID is set but is not a UUID in canonical
	// text form: the relay would refuse the message.
	ErrInvalidID = errors.New("outbox: message id is not a UUID")
	// ErrInvalidText means the type, key or a header is not valid UTF-8.
	ErrInvalidText = errors.New("outbox: message text is not valid UTF-8")
)

// EmitOption changes how Emit writes a message.
type EmitOption func(*emitOptions)

type emitOptions struct {
	prefix string
	binary bool
	key    []byte
}

// Prefix makes Emit use prefix, which must be the relay's
// postgres.message_prefix, instead of DefaultPrefix.
func Prefix(prefix string) EmitOption { return func(o *emitOptions) { o.prefix = prefix } }

// SigningKey makes Emit sign the envelope with key, one of the relay's
// postgres.message_keys: a relay with message_keys publishes only signed
// envelopes and parks the others, so that a role that may call
// pg_logical_emit_message but holds no key cannot publish
// (docs/security.md). The signature covers the prefix and every byte of
// the envelope; it is its first field, "sig" (package internal/envsig
// gives the scheme). A relay without message_keys reads signed envelopes
// too, so producers may sign before the relay requires it.
func SigningKey(key []byte) EmitOption { return func(o *emitOptions) { o.key = key } }

// BinaryPayload makes Emit take Message.Payload as bytes, not JSON: it
// must be a []byte (any bytes), carried in the envelope's payload_base64
// and published by the relay as they are.
func BinaryPayload() EmitOption { return func(o *emitOptions) { o.binary = true } }

// Emit writes msg through tx, a pgx transaction, as a transactional logical
// message, for a table-less outbox (the relay's postgres.source:
// messages): it runs
//
//	SELECT pg_logical_emit_message(true, prefix, envelope)
//
// where envelope is msg as JSON (Envelope). No table is written. The
// message is in the WAL only if tx commits, in commit order with the
// transaction's other changes; if tx rolls back, it is gone. It needs
// PostgreSQL 14 or later for the relay to receive it, and wal_level =
// logical. msg is validated as by Enqueue (a new UUIDv7 when ID is empty,
// a Type, a JSON Payload unless BinaryPayload, the traceparent from the
// headers or the context) and also: a set ID must be a UUID, and every
// text valid UTF-8. Errors wrap the package's sentinel errors or the
// database's, naming the message id and type.
func Emit(ctx context.Context, tx PgxExecer, msg Message, opts ...EmitOption) error {
	return emit(ctx, msg, opts, func(stmt string, args []any) error {
		_, err := tx.Exec(ctx, stmt, args...)
		return err
	})
}

// EmitSQL is Emit for a database/sql transaction.
func EmitSQL(ctx context.Context, tx SQLExecer, msg Message, opts ...EmitOption) error {
	return emit(ctx, msg, opts, func(stmt string, args []any) error {
		_, err := tx.ExecContext(ctx, stmt, args...)
		return err
	})
}

// emitStmt passes the envelope as bytea: its bytes reach the WAL exactly,
// whatever the database's encoding.
const emitStmt = "SELECT pg_logical_emit_message(true, $1::text, $2::bytea)"

func emit(ctx context.Context, msg Message, opts []EmitOption, exec func(string, []any) error) (err error) {
	o := emitOptionsOf(opts)
	if err := o.check(); err != nil {
		return err
	}
	if msg.ID == "" {
		msg.ID = NewID()
	}
	ctx, span := startCreate(ctx, nil, func() string { return Writer{}.givenTraceparent(ctx, msg.Headers) },
		msg.ID, msg.Type, msg.Key, o.prefix)
	defer func() { endCreate(span, err) }()
	env, err := envelope(ctx, msg, o)
	if err != nil {
		return err
	}
	if err := exec(emitStmt, []any{o.prefix, env}); err != nil {
		return fmt.Errorf("outbox: emitting message %s (type %q) with prefix %q: %w", msg.ID, msg.Type, o.prefix, err)
	}
	return nil
}

func emitOptionsOf(opts []EmitOption) emitOptions {
	o := emitOptions{prefix: DefaultPrefix}
	for _, f := range opts {
		f(&o)
	}
	return o
}

func (o emitOptions) check() error {
	if o.prefix == "" || strings.ContainsRune(o.prefix, 0) {
		return fmt.Errorf("%w: %q", ErrInvalidPrefix, o.prefix)
	}
	return nil
}

// Envelope returns the content Emit writes for msg (with a new UUIDv7 when
// msg.ID is empty), for a producer that calls pg_logical_emit_message
// itself. It is one JSON object, in this field order:
//
//	{"v":1,"id":"<uuid>","type":"<type>","key":"<key>","headers":{…},"payload":<JSON>}
//
// key and headers are left out when empty; with BinaryPayload,
// "payload_base64":"<standard base64>" replaces payload. The payload is
// written byte for byte as given (a []byte or json.RawMessage) or as
// encoding/json marshals it. docs/design.md gives the contract the relay
// reads.
func Envelope(ctx context.Context, msg Message, opts ...EmitOption) ([]byte, error) {
	o := emitOptionsOf(opts)
	if msg.ID == "" {
		msg.ID = NewID()
	}
	return envelope(ctx, msg, o)
}

// envelopeHead is the envelope up to the payload.
type envelopeHead struct {
	V       int               `json:"v"`
	ID      string            `json:"id"`
	Type    string            `json:"type"`
	Key     string            `json:"key,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// RFC 3339, UTC; left out when zero.
	DeliverAt string `json:"deliver_at,omitempty"`
	ExpiresAt string `json:"expires_at,omitempty"`
}

// rfc3339 is t in the envelope's form, "" for the zero time.
func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func envelope(ctx context.Context, msg Message, o emitOptions) ([]byte, error) {
	env, err := unsigned(ctx, msg, o)
	if err != nil || o.key == nil {
		return env, err
	}
	return envsig.Sign(o.key, o.prefix, env), nil
}

func unsigned(ctx context.Context, msg Message, o emitOptions) ([]byte, error) {
	fail := func(err error) ([]byte, error) {
		return nil, fmt.Errorf("message %s (type %q): %w", msg.ID, msg.Type, err)
	}
	if len(msg.ID) != 36 || uuid.Validate(msg.ID) != nil {
		return fail(fmt.Errorf("%w: %q", ErrInvalidID, msg.ID))
	}
	if msg.Type == "" {
		return fail(ErrNoType)
	}
	headers, err := Writer{}.headers(ctx, msg.Headers)
	if err != nil {
		return fail(err)
	}
	texts := []string{msg.Type, msg.Key}
	for k, v := range headers {
		texts = append(texts, k, v)
	}
	for _, s := range texts {
		if !utf8.ValidString(s) {
			return fail(fmt.Errorf("%w: %q", ErrInvalidText, s))
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(envelopeHead{V: 1, ID: msg.ID, Type: msg.Type, Key: msg.Key, Headers: headers,
		DeliverAt: rfc3339(msg.DeliverAt), ExpiresAt: rfc3339(msg.ExpiresAt)}); err != nil {
		return fail(fmt.Errorf("encoding the envelope: %w", err))
	}
	out := bytes.TrimSuffix(bytes.TrimSuffix(b.Bytes(), []byte("\n")), []byte("}"))
	if o.binary {
		p, ok := msg.Payload.([]byte)
		if !ok || p == nil {
			return fail(fmt.Errorf("%w: BinaryPayload takes a []byte, got %T", ErrInvalidPayload, msg.Payload))
		}
		out = append(out, `,"payload_base64":"`...)
		out = base64.StdEncoding.AppendEncode(out, p)
		return append(out, `"}`...), nil
	}
	payload, err := encodePayload(msg.Payload)
	if err != nil {
		return fail(err)
	}
	if !utf8.Valid(payload) {
		return fail(fmt.Errorf("%w: not valid UTF-8 (use BinaryPayload for bytes)", ErrInvalidPayload))
	}
	out = append(out, `,"payload":`...)
	out = append(out, payload...)
	return append(out, '}'), nil
}
