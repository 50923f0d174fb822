package decoder

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/layout"
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
	colDeliver = layout.DeliverAt
	colExpires = layout.ExpiresAt
)

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
	colDeliver: {oidTSTZ, oidTS},
	colExpires: {oidTSTZ, oidTS},
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
