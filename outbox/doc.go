// Package outbox is the producer side of walpost: it writes an outbox row
// inside the caller's database transaction, so that the state change and
// the message commit, or roll back, together.
//
// # Why a row and not a publish
//
// Saving state and publishing to a broker are two writes to two systems,
// and no transaction spans both: publish first and a rollback leaves a
// message about something that never happened; publish after commit and a
// crash in between loses it. The outbox turns the second write into a row
// of the first transaction. The walpost relay then streams committed outbox
// INSERTs out of PostgreSQL's logical replication, in commit order, to the
// brokers, and delivers each at least once; receivers drop copies by
// message id (see package github.com/walpost/walpost/inbox).
//
// # Writing a message
//
// With pgx:
//
//	tx, err := pool.Begin(ctx)
//	...
//	_, err = tx.Exec(ctx, `UPDATE documents SET signed_at = now() WHERE id = $1`, docID)
//	...
//	err = outbox.Enqueue(ctx, tx, outbox.Message{
//		Type:    "document.signed",
//		Key:     docID, // ordering key: messages with one key keep their order
//		Payload: DocumentSigned{ID: docID, By: user},
//	})
//	...
//	err = tx.Commit(ctx)
//
// With database/sql (driver "pgx" from github.com/jackc/pgx/v5/stdlib) use
// EnqueueSQL with the *sql.Tx. Message.ID defaults to a new UUIDv7; set it
// (for example from NewID) when you need to know it before the commit.
//
// # Table and column names
//
// Enqueue writes to public.outbox, whose DDL (DDL(DefaultTable), also
// sql/outbox.sql) is:
//
//	CREATE TABLE IF NOT EXISTS public.outbox (
//	    id         uuid        PRIMARY KEY,
//	    type       text        NOT NULL,
//	    key        text        NULL,
//	    payload    jsonb       NOT NULL,
//	    headers    jsonb       NULL,
//	    created_at timestamptz NOT NULL DEFAULT now(),
//	    seq        bigint      GENERATED ALWAYS AS IDENTITY
//	);
//
// For another table or other column names, use a Writer whose Table and
// Columns match the relay's postgres.table and columns: settings. Names
// are taken literally: "public.outbox" is split on its dot into schema and
// table, and each part is quoted, so there is no case folding.
//
// # Trace context
//
// The trace context does not cross the outbox by itself. Enqueue and Emit
// record a producer span, "create <table>" (kind producer, the messaging
// semantic conventions' create operation: messaging.message.id,
// walpost.outbox.id, walpost.outbox.type, walpost.outbox.key), and store
// its W3C traceparent in the headers (key "traceparent"); the relay puts
// the headers on the broker message and records its publish span as a
// child of that span (docs/operations.md, "Tracing"), and the inbox
// package's receive span continues it.
//
// The span's parent is the traceparent given for the message, in order:
// the message's own Headers["traceparent"], Writer.Traceparent, the
// context (ContextWithTraceparent); else the OpenTelemetry span active in
// ctx. The span is recorded with Writer.TracerProvider, or OpenTelemetry's
// global provider (otel.GetTracerProvider). The package depends on the
// OpenTelemetry API only: without an SDK installed (or when the sampler
// drops the span) nothing is recorded and the given traceparent, if any,
// is stored as it is, as before. So with an SDK installed:
//
//	ctx, span := tracer.Start(ctx, "place order")
//	defer span.End()
//	err := outbox.Enqueue(ctx, tx, msg) // create public.outbox, child of "place order"
//
// # Concurrency
//
// The package functions and a Writer whose fields are not modified are
// safe for concurrent use; each call uses only the transaction it is
// given, which, as pgx.Tx and *sql.Tx are not safe for concurrent use,
// must not be used by another goroutine at the same time.
package outbox
