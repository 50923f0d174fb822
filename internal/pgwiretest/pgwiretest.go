// Package pgwiretest builds pgoutput protocol v1 messages by hand, written
// from PostgreSQL's documentation ("Logical Replication Message Formats"),
// for the tests of the packages that read them (decoder, pipeline): one
// set of builders, as pglogrepl keeps one in its message_test.go. Only
// _test.go files import it. Its functions are pure and safe for
// concurrent use.
package pgwiretest

import (
	"encoding/binary"
	"time"

	"github.com/jackc/pglogrepl"
)

// Col is a column of a Relation message: its name and its type's OID. It
// is an alias of an unnamed struct so that tests may write Col{"id",
// OIDUUID} without field names (go vet asks for them on a named struct of
// another package).
type Col = struct {
	Name string
	OID  uint32
}

// OIDs of the types the tests use most.
const (
	OIDText        = 25
	OIDJSONB       = 3802
	OIDUUID        = 2950
	OIDTimestamptz = 1184
)

// OutboxCols are sql/outbox.sql's columns (layout.Default).
var OutboxCols = []Col{{"id", OIDUUID}, {"type", OIDText}, {"key", OIDText}, {"payload", OIDJSONB}, {"headers", OIDJSONB}, {"created_at", OIDTimestamptz}}

// Relation is a Relation message ('R') for the table ns.name of OID id,
// with replica identity default and no type modifiers.
func Relation(id uint32, ns, name string, cols ...Col) []byte {
	b := []byte{'R'}
	b = binary.BigEndian.AppendUint32(b, id)
	b = append(append(b, ns...), 0)
	b = append(append(b, name...), 0)
	b = append(b, 'd')
	b = binary.BigEndian.AppendUint16(b, uint16(len(cols)))
	for _, c := range cols {
		b = append(b, 0)
		b = append(append(b, c.Name...), 0)
		b = binary.BigEndian.AppendUint32(b, c.OID)
		b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
	}
	return b
}

// pgEpoch is where PostgreSQL's timestamps count from.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Begin is a Begin message ('B') of the transaction xid committed at
// final, at time at.
func Begin(final pglogrepl.LSN, at time.Time, xid uint32) []byte {
	b := []byte{'B'}
	b = binary.BigEndian.AppendUint64(b, uint64(final))
	b = binary.BigEndian.AppendUint64(b, uint64(at.Sub(pgEpoch).Microseconds()))
	return binary.BigEndian.AppendUint32(b, xid)
}

// Commit is a Commit message ('C') of the commit record at commit, ending
// at end, at time at.
func Commit(commit, end pglogrepl.LSN, at time.Time) []byte {
	b := []byte{'C', 0}
	b = binary.BigEndian.AppendUint64(b, uint64(commit))
	b = binary.BigEndian.AppendUint64(b, uint64(end))
	return binary.BigEndian.AppendUint64(b, uint64(at.Sub(pgEpoch).Microseconds()))
}

// Insert is an Insert message ('I') into the relation rel, its values in
// text format; nil is NULL.
func Insert(rel uint32, vals ...*string) []byte {
	b := []byte{'I'}
	b = binary.BigEndian.AppendUint32(b, rel)
	b = append(b, 'N')
	b = binary.BigEndian.AppendUint16(b, uint16(len(vals)))
	for _, v := range vals {
		if v == nil {
			b = append(b, 'n')
			continue
		}
		b = append(b, 't')
		b = binary.BigEndian.AppendUint32(b, uint32(len(*v)))
		b = append(b, *v...)
	}
	return b
}

// Message is a logical decoding Message ('M') at lsn, as
// pg_logical_emit_message(transactional, prefix, content) gives it.
func Message(lsn pglogrepl.LSN, transactional bool, prefix, content string) []byte {
	b := []byte{'M', 0}
	if transactional {
		b[1] = 1
	}
	b = binary.BigEndian.AppendUint64(b, uint64(lsn))
	b = append(append(b, prefix...), 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(content)))
	return append(b, content...)
}

// Str is a pointer to v, for Insert's values.
func Str(v string) *string { return &v }
