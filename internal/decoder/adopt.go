package decoder

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/layout"
)

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

// adoptMessage decodes a transactional adopt message of the stream: an
// *Error with Forged set when it comes from a transaction AdoptFrom did
// not name, else adopted's Row.
func (d *Decoder) adoptMessage(m *pglogrepl.LogicalDecodingMessage) (Event, error) {
	if d.adoptXids != nil && !d.adoptXids[d.tx.xid] {
		return Event{}, &Error{LSN: m.LSN, CommitLSN: d.tx.commitLSN, Forged: true, Row: RowValues{"adopt_message": string(m.Content)},
			Err: fmt.Errorf("adopt message (prefix %s) from transaction %d, which neither cdc init --adopt nor cdc recover wrote (postgres.adopt_table has no record of it): not an outbox row", m.Prefix, d.tx.xid)}
	}
	return d.adopted(m)
}

// adopted decodes an adopt message into a Row, exactly as an INSERT of
// the same values would be.
func (d *Decoder) adopted(m *pglogrepl.LogicalDecodingMessage) (Event, error) {
	var a Adopted
	// encoding/json would replace invalid UTF-8 (a SQL_ASCII database)
	// with U+FFFD: such a row is invalid, as in an INSERT.
	err := json.Unmarshal(m.Content, &a)
	old := err == nil && len(a.OIDs) == layout.V1Roles && len(a.Values) == layout.V1Roles
	if old {
		// Written by a walpost before deliver_at and expires_at: it has
		// neither.
		a.OIDs = append(a.OIDs, make([]uint32, int(layout.NumRoles)-layout.V1Roles)...)
		a.Values = append(a.Values, make([]*string, int(layout.NumRoles)-layout.V1Roles)...)
	}
	if err != nil || !utf8.Valid(m.Content) || a.V != 1 || len(a.OIDs) != int(layout.NumRoles) || len(a.Values) != int(layout.NumRoles) {
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
		// sent_at is not carried: it is NULL; nor are deliver_at and
		// expires_at by an older walpost's message.
		if d.m.Columns.Has(role) && rel.idx[role] < 0 && role != layout.SentAt && !(old && int(role) >= layout.V1Roles) {
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
