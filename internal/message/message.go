// Package message holds the outbox message as it travels through the
// relay: the decoder produces it from the replication stream, the pipeline
// routes it, and every sink consumes it. It sits apart from both so that a
// sink depends on the message, not on how it was decoded.
package message

import (
	"time"

	"github.com/jackc/pglogrepl"
)

// Message is one outbox row, decoded from an INSERT in the replication
// stream. Messages are immutable once the decoder returns them; sinks share
// them and must not modify them (safe for concurrent reads).
type Message struct {
	// ID is the outbox id (a UUID in its canonical text form).
	ID string
	// Type is the message type, never empty.
	Type string
	// Key is the ordering key; HasKey is false when the column is NULL.
	Key    string
	HasKey bool
	// Payload is the body as stored. PayloadJSON says it is valid JSON in
	// valid UTF-8 (always so for json, jsonb, text and varchar columns; for
	// bytea only when the bytes happen to be JSON text).
	Payload     []byte
	PayloadJSON bool
	// Headers are the entries of the headers column (nil when NULL).
	// ID, Type, Key and Headers are valid UTF-8.
	Headers map[string]string
	// LSN is the position of the INSERT in the WAL. Rows written by one
	// multi-insert WAL record (COPY, a bulk import) share it.
	LSN pglogrepl.LSN
	// Seq is the row's ordinal among its transaction's outbox rows at LSN:
	// 0 for the first, 1 for the next row of the same multi-insert record,
	// and so on. (CommitLSN, LSN, Seq) identifies the message in the
	// stream, the same on every re-read of its transaction
	// (docs/design.md, "A message's position").
	Seq uint32
	// CommitLSN is the LSN of the commit record of the message's transaction.
	CommitLSN pglogrepl.LSN
	// CommitTime is when the transaction committed.
	CommitTime time.Time
	// Time is the value of the outbox's time column (columns.time), zero
	// when none is mapped. Sinks use EventTime.
	Time time.Time
}

// EventTime is the message's time as sinks publish it (Kafka record
// timestamp, CloudEvents time): the time column's value when one is
// mapped, the commit time otherwise.
func (m *Message) EventTime() time.Time {
	if !m.Time.IsZero() {
		return m.Time
	}
	return m.CommitTime
}

// OrderingKey is the key a broker orders by: the key, or the id when the
// key is NULL.
func (m *Message) OrderingKey() string {
	if m.HasKey {
		return m.Key
	}
	return m.ID
}

// Size is an estimate of the memory the message holds, in bytes, used for
// the in-flight window.
func (m *Message) Size() int {
	n := 160 + len(m.ID) + len(m.Type) + len(m.Key) + len(m.Payload)
	for k, v := range m.Headers {
		n += len(k) + len(v) + 32
	}
	return n
}
