package decoder

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/message"
)

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
		e := &Error{LSN: lsn, CommitLSN: d.tx.commitLSN, Seq: seq, ID: id, Err: err, Row: row, Table: table}
		e.Key, e.KeyKnown = orderingKey(rel, vals, nulls, id)
		return nil, e
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

// maxTypes bounds the message types internType keeps.
const maxTypes = 1024

// internType returns b as a string, the same string for the same type:
// an outbox has few types and every row names one, so a row's type costs
// no allocation once its type was seen (the first maxTypes types are
// kept; any after them are allocated as before).
func (d *Decoder) internType(b []byte) string {
	if s, ok := d.types[string(b)]; ok { // no allocation for the lookup
		return s
	}
	s := string(b)
	if len(d.types) < maxTypes {
		if d.types == nil {
			d.types = map[string]string{}
		}
		d.types[s] = s
	}
	return s
}

// orderingKey is the ordering key of a row that could not be mapped, as
// message.Message.OrderingKey would have it: the key column's text, or
// the id when the key is NULL or not mapped; ok is false when the value
// it needs is not valid UTF-8 or (the id) empty.
func orderingKey(rel *relation, vals [layout.NumRoles][]byte, nulls [layout.NumRoles]bool, id string) (key string, ok bool) {
	if rel.idx[colKey] >= 0 && !nulls[colKey] && vals[colKey] != nil {
		if !utf8.Valid(vals[colKey]) {
			return "", false
		}
		return string(vals[colKey]), true
	}
	return id, id != ""
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
	m.Type = d.internType(vals[colType])
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
	for _, f := range []struct {
		role layout.Role
		to   *time.Time
	}{{colTime, &m.Time}, {colDeliver, &m.DeliverAt}, {colExpires, &m.ExpiresAt}} {
		if rel.idx[f.role] >= 0 && !nulls[f.role] && vals[f.role] != nil {
			t, err := parseTimestamp(vals[f.role])
			if err != nil {
				return fmt.Errorf("%s: column %q: %v", f.role.Field(), d.m.Columns[f.role], err)
			}
			*f.to = t
		}
	}
	return nil
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
