package decoder

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/message"
)

// HeartbeatPrefix is the prefix of the logical messages the relay emits as
// heartbeats (pg_logical_emit_message(false, HeartbeatPrefix, ”)).
const HeartbeatPrefix = "walpost_heartbeat"

// Mapping says which table is the outbox and which columns play which
// role (an optional role's column is "" when the table has none).
type Mapping = layout.Table

// Kind is the kind of an Event.
type Kind uint8

// Event kinds.
const (
	// Skip: nothing for the relay (a message of another table, a Type or
	// Origin message, a transactional logical message).
	Skip Kind = iota
	// Begin opens a transaction; Event.CommitLSN is its commit LSN and
	// Event.Xid its transaction id.
	Begin
	// Row is an outbox row; Event.Msg holds it.
	Row
	// Commit closes the transaction; Event.LSN is the end of its commit
	// record: once every row of the transaction is acknowledged, the slot
	// may be confirmed up to it.
	Commit
	// Progress is a point outside any transaction (a non-transactional
	// logical message, such as the relay's heartbeat) at Event.LSN: every
	// transaction that committed before it has been sent.
	Progress
)

// Event is what one pgoutput message means to the relay.
type Event struct {
	Kind      Kind
	Msg       *message.Message
	LSN       pglogrepl.LSN
	CommitLSN pglogrepl.LSN
	// Xid is a Begin's transaction id (32 bits, as pgoutput sends it):
	// its rows are visible to other sessions once it is (columns.sent_at,
	// docs/design.md "sent_at and adopt").
	Xid uint32
	// Rel is set (with Kind Skip) for a Relation message: what the
	// decoder made of the relation, for the relay to report.
	Rel *RelationNote
}

// Decoder turns pgoutput (protocol version 1, text format) messages into
// Events. It is pure: bytes in, events out, no I/O. It caches Relation
// messages (a Relation sent again after a schema change replaces the
// cached one). A Decoder is not safe for concurrent use.
type Decoder struct {
	m     Mapping
	rels  map[uint32]*relation
	adopt string // prefix of adopted rows' logical messages; "" for none
	// adoptXids, when not nil, are the only transactions whose adopt
	// messages are rows (AdoptFrom); nil takes them from any.
	adoptXids map[uint32]bool
	tx        struct {
		open       bool
		commitLSN  pglogrepl.LSN
		commitTime time.Time
		xid        uint32 // as Begin gives it
		// lastLSN and seq number the transaction's rows that share an
		// LSN (ordinal); counted says a row was numbered since Begin.
		lastLSN pglogrepl.LSN
		seq     uint32
		counted bool
	}

	// envelope is the table-less outbox's prefix (AcceptMessages); ""
	// for an outbox table. keys, when not nil, are the keys one of which
	// must have signed each envelope (RequireSignature).
	envelope string
	keys     [][]byte

	// outboxOID is the outbox table's OID (SetOutbox), 0 when unknown;
	// good is, by relation OID, the columns of the last Relation of the
	// outbox that mapped by name (kept across Reset).
	outboxOID uint32
	good      map[uint32][]Column

	// types are the message types seen, each once (internType).
	types map[string]string
}

// New returns a decoder for the outbox described by m.
func New(m Mapping) *Decoder {
	return &Decoder{m: m, rels: map[uint32]*relation{}, good: map[uint32][]Column{}}
}

// Reset forgets the cached relations and any open transaction. Call it when
// the replication connection is re-established: the server sends Relation
// messages again on a new connection.
func (d *Decoder) Reset() {
	d.rels = map[uint32]*relation{}
	d.tx.open = false
	d.tx.counted = false
}

// InTransaction reports whether a Begin has been decoded without its Commit.
func (d *Decoder) InTransaction() bool { return d.tx.open }

// Decode decodes one pgoutput message whose XLogData started at walStart.
// It returns an *Error for a row that cannot be mapped (bad input) and an
// error wrapping ErrProtocol for malformed bytes. Messages returned do not
// alias data.
func (d *Decoder) Decode(walStart pglogrepl.LSN, data []byte) (Event, error) {
	return d.decode(walStart, data, false)
}

// DecodeOwned is Decode for data that the caller hands over: it must not
// read, modify or reuse data afterwards. In return a large message is not
// held twice: a payload of at least aliasMin bytes is data's own bytes
// rather than a copy (a bytea payload is decoded from hex over its own
// text), so the message keeps data alive. Smaller payloads are copied, so
// that a small message does not keep a larger buffer that data may be part
// of alive. An *Error's Row holds the values as sent, as with Decode.
func (d *Decoder) DecodeOwned(walStart pglogrepl.LSN, data []byte) (Event, error) {
	return d.decode(walStart, data, true)
}

// aliasMin is the size from which DecodeOwned keeps a payload in the
// caller's buffer instead of copying it (a variable for the fuzz target,
// which sets it to 0).
var aliasMin = 64 << 10

func (d *Decoder) decode(walStart pglogrepl.LSN, data []byte, owned bool) (Event, error) {
	if len(data) == 0 {
		return Event{}, fmt.Errorf("%w: empty message at %s", ErrProtocol, walStart)
	}
	switch data[0] {
	case OversizedByte:
		return d.oversized(walStart, data)
	case 'I':
		if d.envelope != "" {
			return Event{Kind: Skip}, nil // a table-less outbox: table rows are not messages
		}
		return d.insert(walStart, data, owned)
	case 'B':
		m, err := parseBegin(walStart, data)
		if err != nil {
			return Event{}, err
		}
		d.tx.open = true
		d.tx.commitLSN = m.FinalLSN
		d.tx.commitTime = m.CommitTime.UTC()
		d.tx.counted = false
		d.tx.xid = m.Xid
		return Event{Kind: Begin, LSN: walStart, CommitLSN: m.FinalLSN, Xid: m.Xid}, nil
	case 'C':
		m, err := parseCommit(walStart, data)
		if err != nil {
			return Event{}, err
		}
		d.tx.open = false
		return Event{Kind: Commit, LSN: m.TransactionEndLSN, CommitLSN: m.CommitLSN}, nil
	case 'R':
		m, err := parse[*pglogrepl.RelationMessage](walStart, data)
		if err != nil {
			return Event{}, err
		}
		rel, note := d.relation(m)
		d.rels[m.RelationID] = rel
		return Event{Kind: Skip, Rel: note}, nil
	case 'M':
		m, err := parse[*pglogrepl.LogicalDecodingMessage](walStart, data)
		if err != nil {
			return Event{}, err
		}
		if d.envelope != "" && m.Prefix == d.envelope {
			return d.enveloped(m)
		}
		if !m.Transactional && !d.tx.open {
			return Event{Kind: Progress, LSN: m.LSN}, nil
		}
		if m.Transactional && d.adopt != "" && d.envelope == "" && m.Prefix == d.adopt {
			return d.adoptMessage(m)
		}
		return Event{Kind: Skip}, nil
	default:
		// Type, Origin, Update, Delete, Truncate and future kinds carry
		// nothing for an insert-only outbox publication.
		return Event{Kind: Skip}, nil
	}
}

// kindNames names the message kinds Decode parses, for errors.
var kindNames = map[byte]string{'B': "Begin", 'C': "Commit", 'R': "Relation", 'M': "logical decoding Message", 'I': "Insert"}

// parse parses a Begin, Commit, Relation or logical decoding Message with
// pglogrepl. Its parsers index past the end of some truncated messages, so
// the framing of the variable-length ones is checked first and any panic
// left is recovered: malformed bytes are an error wrapping ErrProtocol,
// never a crash.
func parse[T pglogrepl.Message](lsn pglogrepl.LSN, data []byte) (t T, err error) {
	kind := kindNames[data[0]]
	defer func() {
		if r := recover(); r != nil {
			var zero T
			t, err = zero, fmt.Errorf("%w: %s at %s: %v", ErrProtocol, kind, lsn, r)
		}
	}()
	if err := checkFraming(data); err != nil {
		return t, fmt.Errorf("%w: %s at %s: %v", ErrProtocol, kind, lsn, err)
	}
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return t, fmt.Errorf("%w: %s at %s: %v", ErrProtocol, kind, lsn, err)
	}
	t, ok := m.(T)
	if !ok {
		return t, fmt.Errorf("%w: %s at %s parsed as %T", ErrProtocol, kind, lsn, m)
	}
	return t, nil
}

// parseBegin and parseCommit read the fixed-size Begin and Commit as
// pglogrepl.Parse does, without its allocation, interface conversion and
// recover: every transaction has one of each, and at low rates (one row
// per transaction) they were a third of the pipeline's allocations per
// message (docs/design.md, "The hot path"). Malformed bytes give parse's
// error.
func parseBegin(lsn pglogrepl.LSN, data []byte) (pglogrepl.BeginMessage, error) {
	var m pglogrepl.BeginMessage
	if err := checkFraming(data); err != nil {
		return m, fmt.Errorf("%w: Begin at %s: %v", ErrProtocol, lsn, err)
	}
	m.FinalLSN = pglogrepl.LSN(binary.BigEndian.Uint64(data[1:]))
	m.CommitTime = pgTime(int64(binary.BigEndian.Uint64(data[9:])))
	m.Xid = binary.BigEndian.Uint32(data[17:])
	return m, nil
}

func parseCommit(lsn pglogrepl.LSN, data []byte) (pglogrepl.CommitMessage, error) {
	var m pglogrepl.CommitMessage
	if err := checkFraming(data); err != nil {
		return m, fmt.Errorf("%w: Commit at %s: %v", ErrProtocol, lsn, err)
	}
	m.Flags = data[1]
	m.CommitLSN = pglogrepl.LSN(binary.BigEndian.Uint64(data[2:]))
	m.TransactionEndLSN = pglogrepl.LSN(binary.BigEndian.Uint64(data[10:]))
	m.CommitTime = pgTime(int64(binary.BigEndian.Uint64(data[18:])))
	return m, nil
}

// pgTime is a protocol timestamp (µs since 2000-01-01 UTC) as pglogrepl
// converts it.
func pgTime(microsSince2000 int64) time.Time {
	const y2k = 946_684_800 * 1_000_000 // µs from the Unix epoch to 2000
	return time.Unix(0, (y2k+microsSince2000)*1000)
}

// checkFraming checks that the fields of a message fit in data, following
// the protocol's message formats.
func checkFraming(data []byte) error {
	r := reader{b: data, p: 1}
	switch data[0] {
	case 'B':
		r.skip(8 + 8 + 4) // final LSN, commit time, xid
	case 'C':
		r.skip(1 + 8 + 8 + 8) // flags, commit LSN, end LSN, commit time
	case 'R':
		r.skip(4) // relation id
		r.cstring()
		r.cstring()
		r.skip(1) // replica identity
		n := r.uint16()
		for i := 0; i < n && r.err == nil; i++ {
			r.skip(1) // flags
			r.cstring()
			r.skip(4 + 4) // type oid, type modifier
		}
	case 'M':
		r.skip(1 + 8) // flags, LSN
		r.cstring()   // prefix
		r.skip(r.uint32())
	}
	return r.err
}

// reader walks a message's fields, remembering the first that does not fit.
type reader struct {
	b   []byte
	p   int
	err error
}

func (r *reader) skip(n int) {
	if r.err == nil && (n < 0 || n > len(r.b)-r.p) {
		r.err = fmt.Errorf("truncated: %d bytes, a field at offset %d needs %d", len(r.b), r.p, n)
	}
	if r.err == nil {
		r.p += n
	}
}

func (r *reader) cstring() {
	if r.err != nil {
		return
	}
	i := bytes.IndexByte(r.b[r.p:], 0)
	if i < 0 {
		r.err = fmt.Errorf("truncated: %d bytes, the string at offset %d has no terminating zero", len(r.b), r.p)
		return
	}
	r.p += i + 1
}

func (r *reader) uint16() int {
	r.skip(2)
	if r.err != nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(r.b[r.p-2:]))
}

func (r *reader) uint32() int {
	r.skip(4)
	if r.err != nil {
		return 0
	}
	v := binary.BigEndian.Uint32(r.b[r.p-4:])
	if uint64(v) > uint64(len(r.b)) {
		return -1 // past any message: skip reports it
	}
	return int(v)
}
