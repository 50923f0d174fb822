// Package decoder turns pgoutput messages into outbox messages.
//
// It is the pure stage of the pipeline: bytes in, events out, no network
// or database. The replication stage hands it the payload of each XLogData
// (pgoutput protocol version 1, text format) with the XLogData's WAL start;
// Decode returns an Event: Begin, Row (an outbox INSERT mapped to a Message
// through the configured columns), Commit, Progress (a non-transactional
// logical message outside any transaction, such as the relay's heartbeat),
// or Skip (anything the relay does not need: other tables, Type and Origin
// messages, updates and deletes).
//
// LSNs. A Row carries the LSN of its INSERT and the LSN of its
// transaction's commit record (Begin's final LSN). A Commit event carries
// the end of the commit record (CommitMessage.TransactionEndLSN, also the
// XLogData start the server sends with it): that is the position to confirm
// once all the transaction's rows are acknowledged, because on restart the
// server skips exactly the transactions whose commit record starts before
// the confirmed position.
//
// Validation. A row whose id is not a UUID, whose type is empty, whose
// payload is NULL or (for json and text columns) not valid JSON, whose
// headers are not a JSON object, whose text (id, type, key, headers, or a
// json, jsonb, text or varchar payload) is not valid UTF-8 (a SQL_ASCII
// database lets any bytes into text), or whose table lacks a mapped
// column, yields an *Error naming the row's id (when readable) and LSN.
// jsonb payloads are valid JSON by construction and are checked as UTF-8
// only; bytea payloads are bytes: published as they are and marked
// PayloadJSON only when they happen to be JSON text (valid JSON and valid
// UTF-8). An *Error alters nothing: its Row keeps the bytes as sent and
// encodes to JSON without loss (see Error).
//
// Malformed bytes. Input that is not valid pgoutput (truncated, fields
// that do not fit the message, an Insert with another number of columns
// than its Relation message, a column in binary format) yields an error
// wrapping ErrProtocol naming the message kind and its LSN; no input makes
// Decode panic. FuzzDecode checks that, and that every message and error
// it returns is valid UTF-8.
//
// Table-less outbox. After AcceptMessages(prefix) (postgres.source:
// messages), a transactional logical message with exactly that prefix is a
// Row whose Message comes from its content, a JSON envelope
// (DecodeEnvelope; docs/design.md, "Table-less outbox envelope"), validated
// as a row is; a bad envelope, or a non-transactional message with the
// prefix, is an *Error at the message's LSN. Inserts are skipped then.
//
// Relation messages are cached by relation id and replaced when the server
// sends one again (after ALTER TABLE, or on a new connection). A mapped
// column that is missing is reported on the first row, not on the Relation
// message, so that the error names a message. The outbox is the relation
// with the OID SetOutbox gave (the relay looks it up at start) or with the
// configured name: a renamed outbox is still the outbox. A Relation whose
// mapped names are missing but whose columns have the count and types, by
// position, of the last Relation of the same OID that mapped by name (a
// column renamed) is mapped by position. Each Relation message's Event
// carries a RelationNote saying which case it was, for the relay to report
// (docs/design.md, "The publication or the table changing under the
// relay").
//
// Files. decoder.go holds the Decoder, its Event kinds and Decode, which
// frames each message (checkFraming, parse) and dispatches it by kind;
// errors.go the errors (ErrProtocol, *Error and its RowValues);
// relations.go Relation messages: which relation is the outbox (name or
// OID), the mapped columns by name or by position, and their types;
// rows.go an Insert's tuple and the mapping of an outbox row to a
// Message; values.go the checks and conversions of single values (UTF-8,
// JSON payloads and headers, bytea hex, timestamps); adopt.go the adopt
// messages of cdc init --adopt and cdc recover; envelope.go the table-less
// outbox's envelopes; table.go TableRow, a row read from the table
// (cdc replay, cdc dead-letter resend).
package decoder
