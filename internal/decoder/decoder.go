package decoder

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/message"
)

// Postgres type OIDs the decoder knows.
const (
	oidBytea   = 17
	oidText    = 25
	oidJSON    = 114
	oidVarchar = 1043
	oidBPChar  = 1042
	oidJSONB   = 3802
	oidUUID    = 2950
	oidTS      = 1114 // timestamp without time zone
	oidTSTZ    = 1184
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

// RelationNote is what the decoder made of a Relation message
// (docs/design.md, "The publication or the table changing under the
// relay"): the outbox, the outbox under another name or another OID, the
// outbox with its columns renamed (mapped by position), or a relation that
// is not the outbox (Foreign: its rows are skipped).
type RelationNote struct {
	OID  uint32
	Name string // schema.name as the Relation message gives it
	// Foreign: neither the outbox's OID nor its configured name.
	Foreign bool
	// Renamed: the outbox's OID under another name.
	Renamed bool
	// Recreated: the configured name under another OID than the one the
	// relay looked up at start (SetOutbox).
	Recreated bool
	// Positional: mapped columns are missing by name, but the columns'
	// count and types are those of the last Relation of this OID that
	// mapped by name, so they are mapped by position; Columns says how.
	Positional bool
	Columns    string
}

// Error is a row the decoder cannot map to a message: bad input, not a
// protocol failure. It names the row's position and, when it could be read,
// its id.
//
// Nothing in an Error is altered to make it printable: Error() and ID are
// valid UTF-8 (a value that is not is quoted with Go escapes, \xff, in
// the text, and an id that is not valid UTF-8 is not an ID), and Row keeps
// the values' bytes exactly as sent; its JSON encoding (RowValues.MarshalJSON,
// which encoding/json uses) writes a value that is not valid UTF-8 as
// {"base64": "..."} instead of letting encoding/json replace its bytes
// with U+FFFD.
type Error struct {
	LSN       pglogrepl.LSN
	CommitLSN pglogrepl.LSN
	Seq       uint32 // the row's ordinal at LSN (message.Message.Seq)
	ID        string // "" when the id itself could not be read
	Err       error
	// Row holds the mapped columns' values as sent (text format), by
	// column name; NULL columns are absent. It lets a dead-letter policy
	// park the row for repair: marshal it with encoding/json.
	Row RowValues
	// Table is set when the table's columns do not fit the mapping (a
	// mapped column missing or of an unusable type): every row of the
	// table fails alike until the config or the table is fixed, so such
	// an error is not one to park rows for.
	Table bool
	// Forged is set for a message that claims to be an outbox message but
	// was not written by whom the relay trusts: an envelope without a
	// valid signature under postgres.message_keys, or an adopt message of
	// a transaction no cdc init --adopt or cdc recover recorded. It is
	// never published, and relay.on_invalid does not apply: no role may
	// stop the relay with it (docs/security.md).
	Forged bool
}

func (e *Error) Error() string {
	at := e.LSN.String()
	if e.Seq > 0 {
		at = fmt.Sprintf("%s (row %d of a multi-row insert)", at, e.Seq+1)
	}
	if e.ID != "" {
		return fmt.Sprintf("outbox message %s at LSN %s: %v", e.ID, at, e.Err)
	}
	return fmt.Sprintf("outbox row at LSN %s: %v", at, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// RowValues is an outbox row's mapped columns, by column name: each value as
// the server sent it, in text format, byte for byte. Values need not be
// valid UTF-8 (a SQL_ASCII database stores any bytes in text).
type RowValues map[string]string

// MarshalJSON encodes the row as a JSON object with sorted keys. A value
// that is valid UTF-8 is a JSON string; a value that is not is an object
// {"base64": "<the bytes in standard base64>"}, so the encoding is
// lossless and a reader tells the two apart by the JSON type. Keys are the
// mapping's column names (from the config, valid UTF-8); a key that is not
// valid UTF-8 is an error rather than a silently altered name.
func (r RowValues) MarshalJSON() ([]byte, error) {
	if r == nil {
		return []byte("null"), nil
	}
	b := []byte{'{'}
	for i, k := range slices.Sorted(maps.Keys(r)) {
		if !utf8.ValidString(k) {
			return nil, fmt.Errorf("decoder: row column name %q is not valid UTF-8", k)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		if v := r[k]; utf8.ValidString(v) {
			b = appendJSONString(b, v)
		} else {
			b = append(b, `{"base64":"`...)
			b = base64.StdEncoding.AppendEncode(b, []byte(v))
			b = append(b, `"}`...)
		}
	}
	return append(b, '}'), nil
}

// appendJSONString appends s, valid UTF-8, as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// ErrProtocol is wrapped by errors for bytes that are not valid pgoutput.
var ErrProtocol = errors.New("decoder: malformed pgoutput message")

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
}

// Column is a column of a relation as a Relation message lists it: its
// name and type OID.
type Column struct {
	Name string
	Type uint32
}

// SetOutbox tells the decoder the outbox table's OID and its columns in
// attribute order (non-dropped, not generated: as a Relation message lists
// them), as the catalog has them now. The outbox is then recognised by its
// OID as well as by its name, and a Relation whose columns were renamed
// since can be mapped by position (RelationNote.Positional). cols that do
// not map by name are not kept.
func (d *Decoder) SetOutbox(oid uint32, cols []Column) {
	d.outboxOID = oid
	m := &pglogrepl.RelationMessage{RelationID: oid, Namespace: d.m.Schema, RelationName: d.m.Name}
	for _, c := range cols {
		m.Columns = append(m.Columns, &pglogrepl.RelationMessageColumn{Name: c.Name, DataType: c.Type})
	}
	if r := d.mapColumns(&relation{name: d.m.String(), outbox: true, ncols: len(cols)}, m.Columns); len(r.missing) == 0 && r.bad == nil {
		d.good[oid] = cols
	}
}

// relation is a cached Relation message: the outbox table with the index of
// each mapped column, or another table (outbox=false).
type relation struct {
	name    string
	outbox  bool
	ncols   int
	idx     [layout.NumRoles]int // by role; -1 when absent
	oid     [layout.NumRoles]uint32
	missing []string // mapped columns the table lacks: an error on first row
	has     []string // the table's columns, when some are missing
	bad     error    // a mapped column of an unusable type
}

const (
	colID      = layout.ID
	colType    = layout.Type
	colKey     = layout.Key
	colPayload = layout.Payload
	colHeaders = layout.Headers
	colTime    = layout.Time
	colSentAt  = layout.SentAt
)

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

// ordinal returns the Seq of the transaction's next outbox row at lsn:
// rows of one multi-insert WAL record (COPY) share their LSN, and the
// server sends them, in the same order, on every re-read of the
// transaction, so (CommitLSN, LSN, Seq) names each row for good.
func (d *Decoder) ordinal(lsn pglogrepl.LSN) uint32 {
	if d.tx.counted && lsn == d.tx.lastLSN {
		d.tx.seq++
	} else {
		d.tx.lastLSN, d.tx.seq, d.tx.counted = lsn, 0, true
	}
	return d.tx.seq
}

// AdoptPrefix is the prefix of the transactional logical messages that
// `cdc init --adopt` emits for the rows a slot's relay must adopt (rows
// committed before the slot existed and not yet sent).
func AdoptPrefix(slot string) string { return "walpost.adopt." + slot }

// Adopted is the content of an adopt message: the row's mapped columns by
// role (layout.Role order), each value as text (nil for NULL or
// unmapped), and each column's type oid (0 when unmapped).
type Adopted struct {
	V      int       `json:"v"`
	OIDs   []uint32  `json:"oids"`
	Values []*string `json:"values"`
}

// AcceptAdopted makes the decoder read the transactional logical messages
// with prefix (AdoptPrefix of the slot) as outbox rows.
func (d *Decoder) AcceptAdopted(prefix string) { d.adopt = prefix }

// AdoptFrom makes the decoder take adopt messages for rows only in the
// transactions with these xids (postgres.adopt_table: those of `cdc init
// --adopt` and `cdc recover`). An adopt message of any other transaction
// is an *Error with Forged set: whoever wrote it may not publish.
func (d *Decoder) AdoptFrom(xids []uint32) {
	d.adoptXids = make(map[uint32]bool, len(xids))
	for _, x := range xids {
		d.adoptXids[x] = true
	}
}

// adopted decodes an adopt message into a Row, exactly as an INSERT of
// the same values would be.
func (d *Decoder) adopted(m *pglogrepl.LogicalDecodingMessage) (Event, error) {
	var a Adopted
	// encoding/json would replace invalid UTF-8 (a SQL_ASCII database)
	// with U+FFFD: such a row is invalid, as in an INSERT.
	if err := json.Unmarshal(m.Content, &a); err != nil || !utf8.Valid(m.Content) || a.V != 1 || len(a.OIDs) != int(layout.NumRoles) || len(a.Values) != int(layout.NumRoles) {
		// Bad input, not a protocol failure: on_invalid and cdc skip
		// apply, as to a row.
		return Event{}, &Error{LSN: m.LSN, CommitLSN: d.tx.commitLSN, Row: RowValues{"adopt_message": string(m.Content)},
			Err: fmt.Errorf("adopt message (prefix %s) is not a version 1 row of %d columns: %s", m.Prefix, layout.NumRoles, excerpt(m.Content))}
	}
	rel := &relation{name: d.m.String(), outbox: true}
	var vals [layout.NumRoles][]byte
	var nulls [layout.NumRoles]bool
	for role := range layout.NumRoles {
		rel.idx[role], rel.oid[role] = -1, a.OIDs[role]
		if a.OIDs[role] != 0 && d.m.Columns.Has(role) {
			rel.idx[role] = int(role)
		}
		if v := a.Values[role]; v != nil {
			vals[role] = []byte(*v)
		} else {
			nulls[role] = true
		}
	}
	for role := range layout.NumRoles {
		if d.m.Columns.Has(role) && rel.idx[role] < 0 && role != layout.SentAt { // sent_at is not carried: it is NULL
			rel.missing = append(rel.missing, fmt.Sprintf("%s %q", role.Field(), d.m.Columns[role]))
		}
	}
	rel.bad = checkTypes(rel, d.m.Columns)
	msg, err := d.row(rel, m.LSN, vals, nulls, false)
	if err != nil {
		return Event{}, err
	}
	return Event{Kind: Row, Msg: msg, LSN: m.LSN, CommitLSN: d.tx.commitLSN}, nil
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
	case 'I':
		if d.envelope != "" {
			return Event{Kind: Skip}, nil // a table-less outbox: table rows are not messages
		}
		return d.insert(walStart, data, owned)
	case 'B':
		m, err := parse[*pglogrepl.BeginMessage](walStart, data)
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
		m, err := parse[*pglogrepl.CommitMessage](walStart, data)
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
			if d.adoptXids != nil && !d.adoptXids[d.tx.xid] {
				return Event{}, &Error{LSN: m.LSN, CommitLSN: d.tx.commitLSN, Forged: true, Row: RowValues{"adopt_message": string(m.Content)},
					Err: fmt.Errorf("adopt message (prefix %s) from transaction %d, which neither cdc init --adopt nor cdc recover wrote (postgres.adopt_table has no record of it): not an outbox row", m.Prefix, d.tx.xid)}
			}
			return d.adopted(m)
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

// relation reads a Relation message. The outbox is the relation with the
// outbox's OID (SetOutbox) or its configured name: a renamed outbox is
// still the outbox, and so is a table created again under its name.
// Mapped columns missing by name are mapped by position when the columns'
// count and types are those of the last Relation of the same OID that
// mapped by name (a column renamed, and maybe renamed back: the same
// attributes). The note says what the relay should report.
func (d *Decoder) relation(m *pglogrepl.RelationMessage) (*relation, *RelationNote) {
	r := &relation{name: m.Namespace + "." + m.RelationName, ncols: len(m.Columns)}
	note := &RelationNote{OID: m.RelationID, Name: printable(r.name)}
	byName := m.Namespace == d.m.Schema && m.RelationName == d.m.Name
	byOID := d.outboxOID != 0 && m.RelationID == d.outboxOID
	if d.envelope != "" || !byName && !byOID {
		note.Foreign = d.envelope == "" // a table-less outbox's publication carries no table
		return r, note
	}
	note.Renamed, note.Recreated = !byName, !byOID && d.outboxOID != 0
	r.outbox = true
	d.mapColumns(r, m.Columns)
	if len(r.missing) == 0 && r.bad == nil {
		cols := make([]Column, len(m.Columns))
		for i, c := range m.Columns {
			cols[i] = Column{Name: c.Name, Type: c.DataType}
		}
		d.good[m.RelationID] = cols
		return r, note
	}
	good, ok := d.good[m.RelationID]
	if !ok || len(good) != len(m.Columns) {
		return r, note
	}
	renamed := make([]*pglogrepl.RelationMessageColumn, len(m.Columns))
	var diffs []string
	for i, c := range m.Columns {
		if c.DataType != good[i].Type {
			return r, note
		}
		renamed[i] = &pglogrepl.RelationMessageColumn{Name: good[i].Name, DataType: c.DataType}
		if c.Name != good[i].Name {
			diffs = append(diffs, fmt.Sprintf("%q as %q", printable(c.Name), printable(good[i].Name)))
		}
	}
	p := &relation{name: r.name, outbox: true, ncols: r.ncols}
	if d.mapColumns(p, renamed); len(p.missing) > 0 || p.bad != nil {
		return r, note
	}
	note.Positional, note.Columns = true, strings.Join(diffs, ", ")
	return p, note
}

// mapColumns sets r's column indexes, types, missing and bad from cols by
// the mapping's column names, and returns r.
func (d *Decoder) mapColumns(r *relation, cols []*pglogrepl.RelationMessageColumn) *relation {
	names := d.m.Columns
	var have []string
	for i := range r.idx {
		r.idx[i] = -1
	}
	for ci, c := range cols {
		have = append(have, printable(c.Name))
		for role, n := range names {
			if n != "" && c.Name == n {
				r.idx[role] = ci
				r.oid[role] = c.DataType
			}
		}
	}
	for role, n := range names {
		if n != "" && r.idx[role] < 0 {
			r.missing = append(r.missing, fmt.Sprintf("%s %q", layout.Role(role).Field(), n))
		}
	}
	if len(r.missing) > 0 {
		r.has = have
	}
	r.bad = checkTypes(r, names)
	return r
}

// accepted lists, by role, the column types the decoder maps, in the order
// errors name them.
var accepted = [layout.NumRoles][]uint32{
	colID:      {oidUUID, oidText, oidVarchar},
	colType:    {oidText, oidVarchar, oidBPChar},
	colKey:     {oidText, oidVarchar, oidBPChar, oidUUID},
	colPayload: {oidJSONB, oidJSON, oidText, oidVarchar, oidBytea},
	colHeaders: {oidJSONB, oidJSON},
	colTime:    {oidTSTZ, oidTS},
	colSentAt:  {oidTSTZ, oidTS},
}

// typeNames names the types of accepted.
var typeNames = map[uint32]string{
	oidBytea: "bytea", oidText: "text", oidJSON: "json", oidVarchar: "varchar",
	oidBPChar: "char(n)", oidJSONB: "jsonb", oidUUID: "uuid",
	oidTSTZ: "timestamptz", oidTS: "timestamp",
}

// acceptedNames returns the names of the types accepted for role, for
// errors: "jsonb, json".
func acceptedNames(role layout.Role) string {
	names := make([]string, len(accepted[role]))
	for i, o := range accepted[role] {
		names[i] = typeNames[o]
	}
	return strings.Join(names, ", ")
}

func checkTypes(r *relation, names layout.Columns) error {
	for role := range layout.NumRoles {
		if r.idx[role] >= 0 && !slices.Contains(accepted[role], r.oid[role]) {
			return fmt.Errorf("%s: column %q has type oid %d; it must be one of %s", role.Field(), names[role], r.oid[role], acceptedNames(role))
		}
	}
	return nil
}

// insert decodes 'I' relid(4) 'N' tupledata by hand: pglogrepl's TupleData
// allocates and copies every column, and this is the hot path. It checks
// every length against data: no input makes it index out of range.
func (d *Decoder) insert(lsn pglogrepl.LSN, data []byte, owned bool) (Event, error) {
	if len(data) < 8 {
		return Event{}, fmt.Errorf("%w: short Insert at %s (%d bytes)", ErrProtocol, lsn, len(data))
	}
	relID := binary.BigEndian.Uint32(data[1:5])
	rel, ok := d.rels[relID]
	if !ok {
		return Event{}, fmt.Errorf("%w: Insert at %s for relation %d without a Relation message", ErrProtocol, lsn, relID)
	}
	if !rel.outbox {
		return Event{Kind: Skip}, nil
	}
	if data[5] != 'N' {
		return Event{}, fmt.Errorf("%w: Insert at %s: tuple tag %q", ErrProtocol, lsn, data[5])
	}
	n := int(binary.BigEndian.Uint16(data[6:8]))
	if n != rel.ncols {
		return Event{}, fmt.Errorf("%w: Insert at %s has %d columns, its Relation message %d", ErrProtocol, lsn, n, rel.ncols)
	}
	var vals [layout.NumRoles][]byte
	var nulls [layout.NumRoles]bool
	p := 8
	for ci := 0; ci < n; ci++ {
		if p >= len(data) {
			return Event{}, fmt.Errorf("%w: Insert at %s truncated", ErrProtocol, lsn)
		}
		kind := data[p]
		p++
		var v []byte
		switch kind {
		case 'n', 'u':
		case 't': // 'b' (binary) only comes with the binary option, never asked for
			if len(data)-p < 4 {
				return Event{}, fmt.Errorf("%w: Insert at %s truncated", ErrProtocol, lsn)
			}
			l := binary.BigEndian.Uint32(data[p : p+4])
			p += 4
			if uint64(l) > uint64(len(data)-p) {
				return Event{}, fmt.Errorf("%w: Insert at %s truncated", ErrProtocol, lsn)
			}
			v = data[p : p+int(l)]
			p += int(l)
		default:
			return Event{}, fmt.Errorf("%w: Insert at %s: column kind %q", ErrProtocol, lsn, kind)
		}
		for role, idx := range rel.idx {
			if idx == ci {
				vals[role] = v
				nulls[role] = kind == 'n'
			}
		}
	}
	msg, err := d.row(rel, lsn, vals, nulls, owned)
	if err != nil {
		return Event{}, err
	}
	return Event{Kind: Row, Msg: msg, LSN: lsn, CommitLSN: d.tx.commitLSN}, nil
}

// row maps an outbox row's values to a message. owned: the values' bytes
// are the decoder's (DecodeOwned), and a large payload may alias them.
func (d *Decoder) row(rel *relation, lsn pglogrepl.LSN, vals [layout.NumRoles][]byte, nulls [layout.NumRoles]bool, owned bool) (*message.Message, error) {
	seq := d.ordinal(lsn)
	id := ""
	if rel.idx[colID] >= 0 && vals[colID] != nil && utf8.Valid(vals[colID]) {
		id = string(vals[colID])
	}
	// invalid is the error for this row: bad input, parked or stopped at
	// by the relay's policy; table says the table itself does not fit.
	invalid := func(err error, table bool) (*message.Message, error) {
		row := RowValues{}
		for role, v := range vals {
			if name := d.m.Columns[role]; v != nil && !nulls[role] && name != "" {
				row[name] = string(v)
			}
		}
		return nil, &Error{LSN: lsn, CommitLSN: d.tx.commitLSN, Seq: seq, ID: id, Err: err, Row: row, Table: table}
	}
	if len(rel.missing) > 0 {
		return invalid(fmt.Errorf("table %s lacks mapped column(s) %s (the table has %s); fix columns: in the config (key and headers may be \"-\") or the table",
			rel.name, strings.Join(rel.missing, ", "), strings.Join(rel.has, ", ")), true)
	}
	if rel.bad != nil {
		return invalid(fmt.Errorf("table %s: %v", rel.name, rel.bad), true)
	}
	if !d.tx.open {
		return nil, fmt.Errorf("%w: Insert at %s outside a transaction", ErrProtocol, lsn)
	}
	m := &message.Message{ID: id, LSN: lsn, Seq: seq, CommitLSN: d.tx.commitLSN, CommitTime: d.tx.commitTime}
	if err := d.fill(m, rel, vals, nulls); err != nil {
		return invalid(err, false)
	}
	// The row is good: only now may its bytes change (a bytea payload
	// decoded in place), since an invalid row's Row keeps them as sent.
	setPayload(m, rel.oid[colPayload], vals[colPayload], owned)
	return m, nil
}

// fill checks the row's values and sets m's fields from them, but for
// the payload (setPayload); m.ID is set already. Its error says what is
// wrong with the row.
func (d *Decoder) fill(m *message.Message, rel *relation, vals [layout.NumRoles][]byte, nulls [layout.NumRoles]bool) error {
	// text returns the error for a text value of role that is not valid
	// UTF-8: raw bytes would reach the sinks, or be replaced by U+FFFD.
	text := func(role layout.Role) error {
		if utf8.Valid(vals[role]) {
			return nil
		}
		return invalidUTF8(role.Field(), d.m.Columns[role], vals[role])
	}
	if err := text(colID); err != nil {
		return err
	}
	if m.ID == "" {
		return fmt.Errorf("%s is NULL or empty", colID.Field())
	}
	if rel.oid[colID] != oidUUID {
		if _, err := uuid.Parse(m.ID); err != nil || len(m.ID) != 36 {
			return fmt.Errorf("id %q is not a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", m.ID)
		}
	}
	if nulls[colType] || len(vals[colType]) == 0 {
		return errors.New("type is NULL or empty")
	}
	if err := text(colType); err != nil {
		return err
	}
	m.Type = string(vals[colType])
	if rel.oid[colType] == oidBPChar {
		m.Type = strings.TrimRight(m.Type, " ")
	}
	if rel.idx[colKey] >= 0 && !nulls[colKey] && vals[colKey] != nil {
		if err := text(colKey); err != nil {
			return err
		}
		m.Key, m.HasKey = string(vals[colKey]), true
	}
	if nulls[colPayload] || vals[colPayload] == nil {
		return errors.New("payload is NULL")
	}
	if err := checkPayload(rel.oid[colPayload], vals[colPayload], text); err != nil {
		return err
	}
	if rel.idx[colHeaders] >= 0 && !nulls[colHeaders] && vals[colHeaders] != nil {
		// encoding/json would replace invalid UTF-8 in keys and values
		// with U+FFFD: check the text it parses.
		if err := text(colHeaders); err != nil {
			return err
		}
		h, err := parseHeaders(vals[colHeaders])
		if err != nil {
			return fmt.Errorf("headers: %v", err)
		}
		m.Headers = h
	}
	if rel.idx[colTime] >= 0 && !nulls[colTime] && vals[colTime] != nil {
		t, err := parseTimestamp(vals[colTime])
		if err != nil {
			return fmt.Errorf("%s: column %q: %v", colTime.Field(), d.m.Columns[colTime], err)
		}
		m.Time = t
	}
	return nil
}

// timestampLayouts are the forms of timestamptz and timestamp that
// PostgreSQL writes with DateStyle ISO (the replication connection sets
// it): the offset as +hh, +hh:mm or +hh:mm:ss, or none (timestamp, read
// as UTC).
var timestampLayouts = []string{
	"2006-01-02 15:04:05.999999999Z07",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999Z07:00:00",
	"2006-01-02 15:04:05.999999999",
}

// parseTimestamp reads a timestamp column's text value, in UTC.
func parseTimestamp(v []byte) (time.Time, error) {
	s := string(v)
	for _, l := range timestampLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%s is not a timestamp walpost can publish (infinite, BC, or not in DateStyle ISO)", excerpt(v))
}

// checkPayload checks v, the payload column's value, of type oid.
func checkPayload(oid uint32, v []byte, text func(layout.Role) error) error {
	switch oid {
	case oidJSONB:
		// Valid JSON by construction, but in a SQL_ASCII database its
		// strings may hold any bytes.
		return text(colPayload)
	case oidBytea:
		if err := checkBytea(v); err != nil {
			return fmt.Errorf("payload: %v", err)
		}
		return nil
	default:
		if err := text(colPayload); err != nil {
			return err
		}
		if !json.Valid(v) {
			return fmt.Errorf("payload is not valid JSON (%s)", excerpt(v))
		}
		return nil
	}
}

// setPayload sets m's payload from v, a column of type oid that
// checkPayload accepted. owned: v is the decoder's to keep, and to decode
// in place, when it is at least aliasMin bytes long.
func setPayload(m *message.Message, oid uint32, v []byte, owned bool) {
	alias := owned && len(v) >= max(aliasMin, 1) // never empty: clone gives nil
	if oid != oidBytea {
		m.Payload, m.PayloadJSON = v[:len(v):len(v)], true
		if !alias {
			m.Payload = clone(v)
		}
		return
	}
	n := (len(v) - 2) / 2
	out := v[:n:n] // decoded over its own text
	if !alias {
		out = make([]byte, n)
	}
	unhex(out, v[2:])
	// Bytes, published as JSON only when they are JSON text.
	m.Payload, m.PayloadJSON = out, utf8.Valid(out) && json.Valid(out)
}

// invalidUTF8 is the error for a value of column col (playing role) that
// is not valid UTF-8; it names the first invalid byte and where it is.
func invalidUTF8(role, col string, v []byte) error {
	off := 0
	for off < len(v) {
		r, size := utf8.DecodeRune(v[off:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		off += size
	}
	b := byte(0)
	if off < len(v) {
		b = v[off]
	}
	return fmt.Errorf("%s: column %q is not valid UTF-8 (byte 0x%02x at offset %d); the database encoding is likely SQL_ASCII: fix the producer or convert the text",
		role, col, b, off)
}

// parseHeaders reads a JSON object. String values are kept; other values
// are kept as their JSON text, so nothing is dropped. b must be valid
// UTF-8; a \u escape that stands for no character (an unpaired UTF-16
// surrogate, which encoding/json would replace with U+FFFD) is an error.
func parseHeaders(b []byte) (map[string]string, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("not a JSON object of strings (%s)", excerpt(b))
	}
	if raw == nil {
		return nil, nil
	}
	if err := checkSurrogates(b); err != nil {
		return nil, err
	}
	h := make(map[string]string, len(raw))
	for k, v := range raw {
		var s string
		if len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &s) == nil {
			h[k] = s
		} else {
			h[k] = string(v)
		}
	}
	return h, nil
}

// checkSurrogates reports a \uXXXX escape in the valid JSON text b that is
// half of a UTF-16 surrogate pair without its other half.
func checkSurrogates(b []byte) error {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		// Valid JSON: a backslash is inside a string and starts an escape.
		if i+1 < len(b) && b[i+1] != 'u' {
			i++
			continue
		}
		hi, ok := hex4(b, i+2)
		if !ok {
			return nil // not valid JSON after all: not this check's business
		}
		switch {
		case hi >= 0xD800 && hi < 0xDC00:
			lo, ok := hex4(b, i+8)
			if !ok || i+7 >= len(b) || b[i+6] != '\\' || b[i+7] != 'u' || lo < 0xDC00 || lo >= 0xE000 {
				return fmt.Errorf(`\u%04x at offset %d is an unpaired UTF-16 surrogate: it stands for no character; fix the producer`, hi, i)
			}
			i += 11
		case hi >= 0xDC00 && hi < 0xE000:
			return fmt.Errorf(`\u%04x at offset %d is an unpaired UTF-16 surrogate: it stands for no character; fix the producer`, hi, i)
		default:
			i += 5
		}
	}
	return nil
}

// hex4 reads the four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i < 0 || len(b)-i < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[i:i+4]), 16, 16)
	return rune(v), err == nil
}

// checkBytea checks that v is bytea's text output in hex format
// ("\x0a1b..."), which setPayload decodes.
func checkBytea(v []byte) error {
	if len(v) < 2 || v[0] != '\\' || v[1] != 'x' {
		return errors.New("bytea is not in hex output format; set bytea_output = 'hex'")
	}
	for _, c := range v[2:] {
		if hexValue[c] < 0 {
			return fmt.Errorf("bytea: %v", hex.InvalidByteError(c))
		}
	}
	if len(v)%2 == 1 {
		return fmt.Errorf("bytea: %v", hex.ErrLength)
	}
	return nil
}

// unhex decodes the hex digits src, which checkBytea checked, into dst,
// len(src)/2 bytes. dst may start where src does or before: each byte is
// written after the digits it comes from are read, and at or before them.
func unhex(dst, src []byte) {
	for i := range dst {
		dst[i] = byte(hexValue[src[2*i]])<<4 | byte(hexValue[src[2*i+1]])
	}
}

// hexValue is each byte's value as a hex digit, -1 for a byte that is not
// one.
var hexValue = func() (t [256]int8) {
	for i := range t {
		t[i] = -1
	}
	for i, c := range "0123456789abcdef" {
		t[c] = int8(i)
	}
	for i, c := range "ABCDEF" {
		t[c] = int8(10 + i)
	}
	return t
}()

// printable returns s, or s quoted with Go escapes when it is not valid
// UTF-8, for error texts.
func printable(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strconv.Quote(s)
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

func excerpt(b []byte) string {
	const max = 60
	if len(b) > max {
		return fmt.Sprintf("%q… (%d bytes)", b[:max], len(b))
	}
	return fmt.Sprintf("%q", b)
}
