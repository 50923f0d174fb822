package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/trace"

	"github.com/walpost/walpost/internal/layout"
)

// DefaultTable is the outbox table Enqueue writes to when Writer.Table is
// empty, and the table of sql/outbox.sql.
const DefaultTable = "public.outbox"

// Omit, as a Columns.Key or Columns.Headers value, says the table has no
// such column: the same word as in the relay's columns: config.
const Omit = layout.Omit

// Message is one outbox row.
type Message struct {
	// ID identifies the message end to end: it becomes the Kafka header
	// "id" and the Service Bus MessageId, and receivers deduplicate on it.
	// Empty means a new UUIDv7 (see NewID). The default table's id column
	// is a uuid, so a custom ID must then be a UUID.
	ID string
	// Type is the message type, used for routing. Required.
	Type string
	// Key is the ordering key (usually the aggregate id): the Kafka message
	// key, the Service Bus SessionId. Empty stores NULL; the relay then
	// orders by the id.
	Key string
	// Payload is the message body. A []byte or json.RawMessage must hold
	// valid JSON and is stored as is; any other value is marshalled with
	// encoding/json (so a Go string becomes a JSON string; convert JSON
	// text to json.RawMessage to store it as is). nil is an error; use
	// json.RawMessage("null") for a JSON null.
	Payload any
	// Headers are extra string headers the relay puts on the broker
	// message. Empty stores NULL. Enqueue never modifies the map.
	Headers map[string]string
	// DeliverAt, when not zero, is the earliest time the message is to be
	// delivered: the relay maps it to the broker's scheduled delivery
	// (Service Bus ScheduledEnqueueTime, SQS DelaySeconds, NATS scheduled
	// messages, RabbitMQ's delayed-message exchange); a sink that cannot
	// hold a message back refuses it rather than send it early. It needs
	// Columns.DeliverAt (a timestamptz column); in an envelope (Emit) it is
	// the field deliver_at.
	DeliverAt time.Time
	// ExpiresAt, when not zero, is when the message expires: the broker's
	// time to live, and the relay's relay.on_expired when it reaches the
	// message later. It needs Columns.ExpiresAt; in an envelope it is the
	// field expires_at.
	ExpiresAt time.Time
}

// Columns names the outbox table's columns, like the relay's "columns:"
// config. An empty field means the default name (the field's name in lower
// case). Key and Headers may be Omit ("-") for a table without them; a
// message with a key or headers is then an error, while a traceparent from
// Writer.Traceparent or the context is silently not stored.
type Columns struct {
	ID, Type, Key, Payload, Headers string
	// DeliverAt and ExpiresAt name optional timestamptz columns (the
	// relay's columns.deliver_at and columns.expires_at). Empty or Omit:
	// the table has none (sql/outbox.sql's has none), and a message with
	// DeliverAt or ExpiresAt set is an error.
	DeliverAt, ExpiresAt string
}

// withDefaults returns c with empty fields set to the default names.
func (c Columns) withDefaults() Columns {
	def := func(v, d string) string {
		if v == "" {
			return d
		}
		return v
	}
	return Columns{
		ID:      def(c.ID, "id"),
		Type:    def(c.Type, "type"),
		Key:     def(c.Key, "key"),
		Payload: def(c.Payload, "payload"),
		Headers: def(c.Headers, "headers"),
		// No default: the default table has neither.
		DeliverAt: def(c.DeliverAt, Omit),
		ExpiresAt: def(c.ExpiresAt, Omit),
	}
}

// Writer writes outbox rows to a configurable table. The zero value writes
// to public.outbox with the default column names, and takes the traceparent
// from the context (ContextWithTraceparent).
//
// A Writer is safe for concurrent use as long as its fields are not
// modified; it holds no connection and no state between calls.
type Writer struct {
	// Table is the outbox table, "table" or "schema.table", taken
	// literally (no case folding, no quotes). Empty means DefaultTable.
	Table string
	// Columns maps the message fields to the table's columns.
	Columns Columns
	// Traceparent, when set, returns the W3C traceparent to store in the
	// headers for a call's ctx, or "" for none; it is the place to hook in
	// OpenTelemetry (see the package documentation). When it is nil or
	// returns "", the traceparent from ContextWithTraceparent is used. A
	// traceparent set in Message.Headers takes precedence over both.
	Traceparent func(ctx context.Context) string
	// TracerProvider records the producer span of each message ("create
	// <table>", see the package documentation, "Trace context"); nil:
	// OpenTelemetry's global provider (otel.GetTracerProvider), which
	// records nothing until an OpenTelemetry SDK is installed.
	TracerProvider trace.TracerProvider
	// DeleteAfterInsert deletes the row again, in the same transaction,
	// right after inserting it: the WAL keeps the insert, which the relay
	// streams, and the table stays empty with no cleanup job, but nothing
	// can be replayed from it (see delete.go and docs/configuration.md, "Keeping the
	// outbox small").
	DeleteAfterInsert bool
}

// PgxExecer is the part of a pgx.Tx that Enqueue uses. Pass the pgx.Tx of
// the transaction that changes your state: a pool or a bare connection
// would satisfy the interface too, but then the outbox row would commit on
// its own, which defeats the outbox.
type PgxExecer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// SQLExecer is the part of a *sql.Tx that EnqueueSQL uses. Pass the
// *sql.Tx (or a wrapper such as *sqlx.Tx) of the transaction that changes
// your state, for the reason given at PgxExecer. The database/sql driver
// must be pgx's stdlib ("github.com/jackc/pgx/v5/stdlib") or another
// driver that accepts a []byte argument for a jsonb column.
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Enqueue writes msg to public.outbox through tx, a pgx transaction, with
// the zero Writer. The row becomes visible, and is published by the relay,
// only when tx commits; if tx rolls back, the message is gone too. It is
// safe for concurrent use on different transactions (a pgx.Tx itself is
// not safe for concurrent use).
func Enqueue(ctx context.Context, tx PgxExecer, msg Message) error {
	return Writer{}.Enqueue(ctx, tx, msg)
}

// EnqueueSQL is Enqueue for a database/sql transaction.
func EnqueueSQL(ctx context.Context, tx SQLExecer, msg Message) error {
	return Writer{}.EnqueueSQL(ctx, tx, msg)
}

// NewID returns a new message id: a UUIDv7 in canonical text form. UUIDv7
// ids sort by creation time, which keeps the outbox primary key index
// compact. It panics only if the system's random source fails.
func NewID() string {
	return uuid.Must(uuid.NewV7()).String()
}

// Enqueue writes msg through tx, a pgx transaction, to w's table. It
// validates msg first (see Message) and returns an error wrapping one of
// the package's sentinel errors, or the database's error, naming the
// message id and type. See the package-level Enqueue for the transaction
// contract.
func (w Writer) Enqueue(ctx context.Context, tx PgxExecer, msg Message) error {
	return w.insert(ctx, msg, func(stmt string, args []any) error {
		_, err := tx.Exec(ctx, stmt, args...)
		return err
	})
}

// EnqueueSQL is Writer.Enqueue for a database/sql transaction.
func (w Writer) EnqueueSQL(ctx context.Context, tx SQLExecer, msg Message) error {
	return w.insert(ctx, msg, func(stmt string, args []any) error {
		_, err := tx.ExecContext(ctx, stmt, args...)
		return err
	})
}

// insert prepares msg's INSERT and runs it with exec, in msg's producer
// span (startCreate).
func (w Writer) insert(ctx context.Context, msg Message, exec func(stmt string, args []any) error) (err error) {
	if msg.ID == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("outbox: generating message id: %w", err)
		}
		msg.ID = u.String()
	}
	ctx, span := startCreate(ctx, w.TracerProvider, func() string { return w.givenTraceparent(ctx, msg.Headers) },
		msg.ID, msg.Type, msg.Key, w.table())
	defer func() { endCreate(span, err) }()
	stmt, args, err := w.prepare(ctx, msg)
	if err != nil {
		return err
	}
	if err := exec(stmt, args); err != nil {
		return fmt.Errorf("outbox: inserting message %s (type %q) into %s: %w", args[0], msg.Type, w.table(), err)
	}
	if w.DeleteAfterInsert {
		return w.deleteInserted(args[0], msg, exec)
	}
	return nil
}

func (w Writer) table() string {
	if w.Table == "" {
		return DefaultTable
	}
	return w.Table
}

// prepare validates msg and returns the INSERT statement and its
// arguments; args[0] is the message id.
func (w Writer) prepare(ctx context.Context, msg Message) (string, []any, error) {
	table, err := parseTable(w.table())
	if err != nil {
		return "", nil, err
	}
	cols := w.Columns.withDefaults()
	for _, c := range []struct{ field, name string }{
		{"ID", cols.ID}, {"Type", cols.Type}, {"Payload", cols.Payload},
	} {
		if c.name == Omit {
			return "", nil, fmt.Errorf("%w: Columns.%s cannot be %q", ErrInvalidColumns, c.field, Omit)
		}
	}

	id := msg.ID
	if id == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return "", nil, fmt.Errorf("outbox: generating message id: %w", err)
		}
		id = u.String()
	}
	fail := func(err error) (string, []any, error) {
		return "", nil, fmt.Errorf("message %s (type %q): %w", id, msg.Type, err)
	}
	if msg.Type == "" {
		return fail(ErrNoType)
	}
	payload, err := encodePayload(msg.Payload)
	if err != nil {
		return fail(err)
	}
	headers, err := w.headers(ctx, msg.Headers)
	if err != nil {
		return fail(err)
	}

	names := []string{cols.ID, cols.Type}
	args := []any{id, msg.Type}
	if cols.Key != Omit {
		names = append(names, cols.Key)
		args = append(args, nullIfEmpty(msg.Key))
	} else if msg.Key != "" {
		return fail(ErrNoKeyColumn)
	}
	names = append(names, cols.Payload)
	args = append(args, payload)
	if cols.Headers != Omit {
		var h any // untyped nil is NULL for both pgx and database/sql
		if len(headers) > 0 {
			b, err := json.Marshal(headers)
			if err != nil {
				return fail(fmt.Errorf("encoding headers: %w", err))
			}
			h = b
		}
		names = append(names, cols.Headers)
		args = append(args, h)
	} else if len(msg.Headers) > 0 {
		return fail(ErrNoHeadersColumn)
	}
	for _, t := range []struct {
		col, field string
		v          time.Time
	}{{cols.DeliverAt, "DeliverAt", msg.DeliverAt}, {cols.ExpiresAt, "ExpiresAt", msg.ExpiresAt}} {
		switch {
		case t.col != Omit && t.v.IsZero():
			names = append(names, t.col)
			args = append(args, nil)
		case t.col != Omit:
			names = append(names, t.col)
			args = append(args, t.v)
		case !t.v.IsZero():
			return fail(fmt.Errorf("%w: Message.%s is set but Columns.%s names no column", ErrNoTimeColumn, t.field, t.field))
		}
	}

	stmt := "INSERT INTO " + table.Sanitize() + " ("
	vals := ""
	for i, n := range names {
		if i > 0 {
			stmt += ", "
			vals += ", "
		}
		stmt += pgx.Identifier{n}.Sanitize()
		vals += fmt.Sprintf("$%d", i+1)
	}
	stmt += ") VALUES (" + vals + ")"
	return stmt, args, nil
}

// headers returns the headers to store: h plus the traceparent, if any. It
// returns h itself when there is nothing to add.
func (w Writer) headers(ctx context.Context, h map[string]string) (map[string]string, error) {
	producer := producerTraceparent(ctx) // the producer span's, when one records
	if tp, ok := h[TraceparentHeader]; ok {
		if err := ValidateTraceparent(tp); err != nil {
			return nil, fmt.Errorf("header %s: %w", TraceparentHeader, err)
		}
		if producer == "" {
			return h, nil
		}
	}
	var tp string
	if producer != "" {
		tp = producer
	} else if w.Traceparent != nil {
		tp = w.Traceparent(ctx)
		if tp != "" {
			if err := ValidateTraceparent(tp); err != nil {
				return nil, fmt.Errorf("Writer.Traceparent: %w", err)
			}
		}
	}
	if tp == "" {
		tp = TraceparentFromContext(ctx) // validated when stored
	}
	if tp == "" {
		return h, nil
	}
	out := make(map[string]string, len(h)+1)
	maps.Copy(out, h)
	out[TraceparentHeader] = tp
	return out, nil
}

// givenTraceparent is the traceparent given for a message, the parent of
// its producer span: its own header, Writer.Traceparent's, the context's
// (ContextWithTraceparent); "" when none (the span active in ctx is the
// parent then).
func (w Writer) givenTraceparent(ctx context.Context, h map[string]string) string {
	if tp, ok := h[TraceparentHeader]; ok {
		return tp
	}
	if w.Traceparent != nil {
		if tp := w.Traceparent(ctx); tp != "" {
			return tp
		}
	}
	return TraceparentFromContext(ctx)
}

// encodePayload returns p as JSON bytes (see Message.Payload).
func encodePayload(p any) ([]byte, error) {
	var b []byte
	switch v := p.(type) {
	case nil:
		return nil, ErrNoPayload
	case json.RawMessage:
		b = v
	case []byte:
		b = v
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidPayload, err)
		}
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("%w: %.40q", ErrInvalidPayload, b)
	}
	return b, nil
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
