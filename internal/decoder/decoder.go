package decoder

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
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
)

// HeartbeatPrefix is the prefix of the logical messages the relay emits as
// heartbeats (pg_logical_emit_message(false, HeartbeatPrefix, ”)).
const HeartbeatPrefix = "walpost_heartbeat"

// Mapping says which table is the outbox and which columns play which role.
// Key and Headers may be "" when the table has no such column.
type Mapping struct {
	Schema, Table                   string
	ID, Type, Key, Payload, Headers string
}

// Kind is the kind of an Event.
type Kind uint8

// Event kinds.
const (
	// Skip: nothing for the relay (a message of another table, a Type or
	// Origin message, a transactional logical message).
	Skip Kind = iota
	// Begin opens a transaction; Event.CommitLSN is its commit LSN.
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
	Msg       *Message
	LSN       pglogrepl.LSN
	CommitLSN pglogrepl.LSN
}

// Error is a row the decoder cannot map to a message: bad input, not a
// protocol failure. It names the row's position and, when it could be read,
// its id.
type Error struct {
	LSN       pglogrepl.LSN
	CommitLSN pglogrepl.LSN
	ID        string // "" when the id itself could not be read
	Err       error
	// Row holds the mapped columns' values as sent (text format), by
	// column name; NULL columns are absent. It lets a dead-letter policy
	// park the row for repair.
	Row map[string]string
	// Table is set when the table's columns do not fit the mapping (a
	// mapped column missing or of an unusable type): every row of the
	// table fails alike until the config or the table is fixed, so such
	// an error is not one to park rows for.
	Table bool
}

func (e *Error) Error() string {
	if e.ID != "" {
		return fmt.Sprintf("outbox message %s at LSN %s: %v", e.ID, e.LSN, e.Err)
	}
	return fmt.Sprintf("outbox row at LSN %s: %v", e.LSN, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ErrProtocol is wrapped by errors for bytes that are not valid pgoutput.
var ErrProtocol = errors.New("decoder: malformed pgoutput message")

// Decoder turns pgoutput (protocol version 1, text format) messages into
// Events. It is pure: bytes in, events out, no I/O. It caches Relation
// messages (a Relation sent again after a schema change replaces the
// cached one). A Decoder is not safe for concurrent use.
type Decoder struct {
	m    Mapping
	rels map[uint32]*relation
	tx   struct {
		open       bool
		commitLSN  pglogrepl.LSN
		commitTime time.Time
	}
}

// relation is a cached Relation message: the outbox table with the index of
// each mapped column, or another table (outbox=false).
type relation struct {
	name    string
	outbox  bool
	ncols   int
	idx     [5]int // id, type, key, payload, headers; -1 when absent
	oid     [5]uint32
	missing []string // mapped columns the table lacks: an error on first row
	has     []string // the table's columns, when some are missing
	bad     error    // a mapped column of an unusable type
}

const (
	colID = iota
	colType
	colKey
	colPayload
	colHeaders
)

var roleNames = [5]string{"columns.id", "columns.type", "columns.key", "columns.payload", "columns.headers"}

// New returns a decoder for the outbox described by m.
func New(m Mapping) *Decoder {
	return &Decoder{m: m, rels: map[uint32]*relation{}}
}

// Reset forgets the cached relations and any open transaction. Call it when
// the replication connection is re-established: the server sends Relation
// messages again on a new connection.
func (d *Decoder) Reset() {
	d.rels = map[uint32]*relation{}
	d.tx.open = false
}

// InTransaction reports whether a Begin has been decoded without its Commit.
func (d *Decoder) InTransaction() bool { return d.tx.open }

// Decode decodes one pgoutput message whose XLogData started at walStart.
// It returns an *Error for a row that cannot be mapped (bad input) and an
// error wrapping ErrProtocol for malformed bytes. Messages returned do not
// alias data.
func (d *Decoder) Decode(walStart pglogrepl.LSN, data []byte) (Event, error) {
	if len(data) == 0 {
		return Event{}, fmt.Errorf("%w: empty message at %s", ErrProtocol, walStart)
	}
	switch data[0] {
	case 'I':
		return d.insert(walStart, data)
	case 'B':
		m, err := parse[*pglogrepl.BeginMessage](data)
		if err != nil {
			return Event{}, err
		}
		d.tx.open = true
		d.tx.commitLSN = m.FinalLSN
		d.tx.commitTime = m.CommitTime.UTC()
		return Event{Kind: Begin, LSN: walStart, CommitLSN: m.FinalLSN}, nil
	case 'C':
		m, err := parse[*pglogrepl.CommitMessage](data)
		if err != nil {
			return Event{}, err
		}
		d.tx.open = false
		return Event{Kind: Commit, LSN: m.TransactionEndLSN, CommitLSN: m.CommitLSN}, nil
	case 'R':
		m, err := parse[*pglogrepl.RelationMessage](data)
		if err != nil {
			return Event{}, err
		}
		d.rels[m.RelationID] = d.relation(m)
		return Event{Kind: Skip}, nil
	case 'M':
		m, err := parse[*pglogrepl.LogicalDecodingMessage](data)
		if err != nil {
			return Event{}, err
		}
		if !m.Transactional && !d.tx.open {
			return Event{Kind: Progress, LSN: m.LSN}, nil
		}
		return Event{Kind: Skip}, nil
	default:
		// Type, Origin, Update, Delete, Truncate and future kinds carry
		// nothing for an insert-only outbox publication.
		return Event{Kind: Skip}, nil
	}
}

func parse[T pglogrepl.Message](data []byte) (T, error) {
	var zero T
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return zero, fmt.Errorf("%w: %c: %v", ErrProtocol, data[0], err)
	}
	t, ok := m.(T)
	if !ok {
		return zero, fmt.Errorf("%w: %c parsed as %T", ErrProtocol, data[0], m)
	}
	return t, nil
}

func (d *Decoder) relation(m *pglogrepl.RelationMessage) *relation {
	r := &relation{name: m.Namespace + "." + m.RelationName, ncols: len(m.Columns)}
	if m.Namespace != d.m.Schema || m.RelationName != d.m.Table {
		return r
	}
	r.outbox = true
	names := [5]string{d.m.ID, d.m.Type, d.m.Key, d.m.Payload, d.m.Headers}
	var have []string
	for i := range r.idx {
		r.idx[i] = -1
	}
	for ci, c := range m.Columns {
		have = append(have, c.Name)
		for role, n := range names {
			if n != "" && c.Name == n {
				r.idx[role] = ci
				r.oid[role] = c.DataType
			}
		}
	}
	for role, n := range names {
		if n != "" && r.idx[role] < 0 {
			r.missing = append(r.missing, fmt.Sprintf("%s %q", roleNames[role], n))
		}
	}
	if len(r.missing) > 0 {
		r.has = have
	}
	r.bad = checkTypes(r, names)
	return r
}

func checkTypes(r *relation, names [5]string) error {
	allowed := map[int][]uint32{
		colID:      {oidUUID, oidText, oidVarchar},
		colType:    {oidText, oidVarchar, oidBPChar},
		colKey:     {oidText, oidVarchar, oidBPChar, oidUUID},
		colPayload: {oidJSONB, oidJSON, oidText, oidVarchar, oidBytea},
		colHeaders: {oidJSONB, oidJSON},
	}
	for role := range r.idx {
		if r.idx[role] < 0 {
			continue
		}
		ok := false
		for _, o := range allowed[role] {
			ok = ok || r.oid[role] == o
		}
		if !ok {
			return fmt.Errorf("%s: column %q has type oid %d; it must be one of %s", roleNames[role], names[role], r.oid[role], typeNames[role])
		}
	}
	return nil
}

var typeNames = [5]string{"uuid, text", "text", "text, uuid", "jsonb, json, text, bytea", "jsonb, json"}

// insert decodes 'I' relid(4) 'N' tupledata by hand: pglogrepl's TupleData
// allocates and copies every column, and this is the hot path.
func (d *Decoder) insert(lsn pglogrepl.LSN, data []byte) (Event, error) {
	if len(data) < 8 {
		return Event{}, fmt.Errorf("%w: short insert at %s", ErrProtocol, lsn)
	}
	rel, ok := d.rels[binary.BigEndian.Uint32(data[1:5])]
	if !ok {
		return Event{}, fmt.Errorf("%w: insert at %s for relation %d without a Relation message", ErrProtocol, lsn, binary.BigEndian.Uint32(data[1:5]))
	}
	if !rel.outbox {
		return Event{Kind: Skip}, nil
	}
	if data[5] != 'N' {
		return Event{}, fmt.Errorf("%w: insert at %s: tuple tag %q", ErrProtocol, lsn, data[5])
	}
	var vals [5][]byte
	var nulls [5]bool
	n := int(binary.BigEndian.Uint16(data[6:8]))
	p := 8
	for ci := 0; ci < n; ci++ {
		if p >= len(data) {
			return Event{}, fmt.Errorf("%w: insert at %s truncated", ErrProtocol, lsn)
		}
		kind := data[p]
		p++
		var v []byte
		switch kind {
		case 'n', 'u':
		case 't', 'b':
			if p+4 > len(data) {
				return Event{}, fmt.Errorf("%w: insert at %s truncated", ErrProtocol, lsn)
			}
			l := int(binary.BigEndian.Uint32(data[p : p+4]))
			p += 4
			if l < 0 || p+l > len(data) {
				return Event{}, fmt.Errorf("%w: insert at %s truncated", ErrProtocol, lsn)
			}
			v = data[p : p+l]
			p += l
		default:
			return Event{}, fmt.Errorf("%w: insert at %s: column kind %q", ErrProtocol, lsn, kind)
		}
		for role, idx := range rel.idx {
			if idx == ci {
				vals[role] = v
				nulls[role] = kind == 'n'
			}
		}
	}
	msg, err := d.row(rel, lsn, vals, nulls)
	if err != nil {
		return Event{}, err
	}
	return Event{Kind: Row, Msg: msg, LSN: lsn, CommitLSN: d.tx.commitLSN}, nil
}

func (d *Decoder) row(rel *relation, lsn pglogrepl.LSN, vals [5][]byte, nulls [5]bool) (*Message, error) {
	id := ""
	if rel.idx[colID] >= 0 && vals[colID] != nil {
		id = string(vals[colID])
	}
	table := false
	fail := func(format string, args ...any) (*Message, error) {
		row := map[string]string{}
		names := [5]string{d.m.ID, d.m.Type, d.m.Key, d.m.Payload, d.m.Headers}
		for role, v := range vals {
			if v != nil && !nulls[role] && names[role] != "" {
				row[names[role]] = string(v)
			}
		}
		return nil, &Error{LSN: lsn, CommitLSN: d.tx.commitLSN, ID: id, Err: fmt.Errorf(format, args...), Row: row, Table: table}
	}
	if len(rel.missing) > 0 {
		table = true
		return fail("table %s lacks mapped column(s) %s (the table has %s); fix columns: in the config (key and headers may be \"-\") or the table",
			rel.name, strings.Join(rel.missing, ", "), strings.Join(rel.has, ", "))
	}
	if rel.bad != nil {
		table = true
		return fail("table %s: %v", rel.name, rel.bad)
	}
	if !d.tx.open {
		return nil, fmt.Errorf("%w: insert at %s outside a transaction", ErrProtocol, lsn)
	}
	if id == "" {
		return fail("%s is NULL or empty", roleNames[colID])
	}
	if rel.oid[colID] != oidUUID {
		if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
			return fail("id %q is not a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", id)
		}
	}
	m := &Message{ID: id, LSN: lsn, CommitLSN: d.tx.commitLSN, CommitTime: d.tx.commitTime}
	if nulls[colType] || len(vals[colType]) == 0 {
		return fail("type is NULL or empty")
	}
	m.Type = string(vals[colType])
	if rel.oid[colType] == oidBPChar {
		m.Type = strings.TrimRight(m.Type, " ")
	}
	if rel.idx[colKey] >= 0 && !nulls[colKey] && vals[colKey] != nil {
		m.Key, m.HasKey = string(vals[colKey]), true
	}
	if nulls[colPayload] || vals[colPayload] == nil {
		return fail("payload is NULL")
	}
	switch rel.oid[colPayload] {
	case oidJSONB:
		m.Payload, m.PayloadJSON = clone(vals[colPayload]), true
	case oidBytea:
		b, err := unhexBytea(vals[colPayload])
		if err != nil {
			return fail("payload: %v", err)
		}
		m.Payload, m.PayloadJSON = b, json.Valid(b)
	default:
		if !json.Valid(vals[colPayload]) {
			return fail("payload is not valid JSON (%s)", excerpt(vals[colPayload]))
		}
		m.Payload, m.PayloadJSON = clone(vals[colPayload]), true
	}
	if rel.idx[colHeaders] >= 0 && !nulls[colHeaders] && vals[colHeaders] != nil {
		h, err := parseHeaders(vals[colHeaders])
		if err != nil {
			return fail("headers: %v", err)
		}
		m.Headers = h
	}
	return m, nil
}

// parseHeaders reads a JSON object. String values are kept; other values
// are kept as their JSON text, so nothing is dropped.
func parseHeaders(b []byte) (map[string]string, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("not a JSON object of strings (%s)", excerpt(b))
	}
	if raw == nil {
		return nil, nil
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

// unhexBytea decodes bytea's text output (hex format, "\x0a1b...").
func unhexBytea(v []byte) ([]byte, error) {
	if len(v) < 2 || v[0] != '\\' || v[1] != 'x' {
		return nil, errors.New("bytea is not in hex output format; set bytea_output = 'hex'")
	}
	out := make([]byte, hex.DecodedLen(len(v)-2))
	if _, err := hex.Decode(out, v[2:]); err != nil {
		return nil, fmt.Errorf("bytea: %v", err)
	}
	return out, nil
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

func excerpt(b []byte) string {
	const max = 60
	if len(b) > max {
		return fmt.Sprintf("%q… (%d bytes)", b[:max], len(b))
	}
	return fmt.Sprintf("%q", b)
}
