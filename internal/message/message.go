// Package message holds the outbox message as it travels through the
// relay: the decoder produces it from the replication stream, the pipeline
// routes it, and every sink consumes it. It sits apart from both so that a
// sink depends on the message, not on how it was decoded.
package message

import (
	"strconv"
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
	// DeliverAt is when the message is to be delivered (columns.deliver_at,
	// or the envelope's deliver_at), zero for at once: a sink delivers it
	// no earlier (the broker's scheduled delivery) or refuses it.
	DeliverAt time.Time
	// ExpiresAt is when the message expires (columns.expires_at, or the
	// envelope's expires_at), zero for never: the broker's time to live,
	// and relay.on_expired when the relay reaches it later.
	ExpiresAt time.Time
	// ClaimCheck, when set, names where the claim check stored the
	// payload (Payload is then empty). Only the claim check sets it, on
	// its copy of the message; never the decoder: the relay's own
	// headers never come from a row (docs/security.md, "The relay's
	// headers").
	ClaimCheck *ClaimRef
}

// The relay's own headers of a claim-checked message (RelayHeaders), the
// same names as inbox.HeaderClaimCheck, inbox.HeaderClaimCheckSize and
// inbox.HeaderClaimCheckSHA256 (a test keeps them equal). Every name
// starting with ReservedPrefix, in any case, is the relay's: no sink
// sends one from the headers column.
const (
	ReservedPrefix    = "walpost-"
	HeaderClaimCheck  = "walpost-claim-check"
	HeaderClaimSize   = "walpost-claim-check-size"
	HeaderClaimSHA256 = "walpost-claim-check-sha256"
)

// ClaimRef is where the claim check stored a message's payload.
type ClaimRef struct {
	// Ref is the object's reference: its blob URL or s3://BUCKET/KEY.
	Ref string
	// Size is the payload's length in bytes.
	Size int
	// SHA256 is the payload's SHA-256 in lower-case hex.
	SHA256 string
}

// Header is one header a sink writes: a name and its value.
type Header struct{ Name, Value string }

// RelayHeaders returns the relay's own headers of m, in the order sinks
// write them, after the headers column's entries (so that they win):
// the claim check's reference, size and SHA-256 when m.ClaimCheck is set,
// else none.
func (m *Message) RelayHeaders() []Header {
	if m.ClaimCheck == nil {
		return nil
	}
	return []Header{
		{HeaderClaimCheck, m.ClaimCheck.Ref},
		{HeaderClaimSize, strconv.Itoa(m.ClaimCheck.Size)},
		{HeaderClaimSHA256, m.ClaimCheck.SHA256},
	}
}

// Expired reports whether m's expiry has passed at now, or falls at or
// before its delivery time (it could never be delivered in time).
func (m *Message) Expired(now time.Time) bool {
	if m.ExpiresAt.IsZero() {
		return false
	}
	return !now.Before(m.ExpiresAt) || !m.DeliverAt.IsZero() && !m.DeliverAt.Before(m.ExpiresAt)
}

// Delay is how long after now m is to be delivered: zero when it has no
// deliver_at or that time has come.
func (m *Message) Delay(now time.Time) time.Duration {
	if m.DeliverAt.IsZero() || !m.DeliverAt.After(now) {
		return 0
	}
	return m.DeliverAt.Sub(now)
}

// TTL is how long m has to live from its delivery on (from now, or from
// its deliver_at when later), for a broker's time to live: zero when it
// has no expiry, and at least a millisecond when it has one (an expired
// message sent anyway is relay.on_expired: send, which clears ExpiresAt).
func (m *Message) TTL(now time.Time) time.Duration {
	if m.ExpiresAt.IsZero() {
		return 0
	}
	from := now
	if m.DeliverAt.After(now) {
		from = m.DeliverAt
	}
	return max(m.ExpiresAt.Sub(from), time.Millisecond)
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
	if c := m.ClaimCheck; c != nil {
		n += len(c.Ref) + len(c.SHA256) + 160
	}
	return n
}
