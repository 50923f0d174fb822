package pipeline

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/replication"
)

// Wire builders for pgoutput protocol v1 messages, as the decoder's tests
// build them (internal/decoder/decoder_test.go and envelope_test.go; copied,
// as test files do not export), and the stream's events around them.

type col struct {
	name string
	oid  uint32
}

const (
	oidText  = 25
	oidJSONB = 3802
	oidUUID  = 2950
)

// outboxCols are sql/outbox.sql's columns (layout.Default).
var outboxCols = []col{{"id", oidUUID}, {"type", oidText}, {"key", oidText}, {"payload", oidJSONB}, {"headers", oidJSONB}, {"created_at", 1184}}

func relationMsg(id uint32, ns, name string, cols ...col) []byte {
	b := []byte{'R'}
	b = binary.BigEndian.AppendUint32(b, id)
	b = append(append(b, ns...), 0)
	b = append(append(b, name...), 0)
	b = append(b, 'd')
	b = binary.BigEndian.AppendUint16(b, uint16(len(cols)))
	for _, c := range cols {
		b = append(b, 0)
		b = append(append(b, c.name...), 0)
		b = binary.BigEndian.AppendUint32(b, c.oid)
		b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
	}
	return b
}

var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func beginMsg(final pglogrepl.LSN, at time.Time, xid uint32) []byte {
	b := []byte{'B'}
	b = binary.BigEndian.AppendUint64(b, uint64(final))
	b = binary.BigEndian.AppendUint64(b, uint64(at.Sub(pgEpoch).Microseconds()))
	return binary.BigEndian.AppendUint32(b, xid)
}

func commitMsg(commit, end pglogrepl.LSN, at time.Time) []byte {
	b := []byte{'C', 0}
	b = binary.BigEndian.AppendUint64(b, uint64(commit))
	b = binary.BigEndian.AppendUint64(b, uint64(end))
	return binary.BigEndian.AppendUint64(b, uint64(at.Sub(pgEpoch).Microseconds()))
}

// insertMsg takes values as strings; nil is NULL.
func insertMsg(rel uint32, vals ...*string) []byte {
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

// emitMsg is a logical decoding Message as pg_logical_emit_message(
// transactional, prefix, content) gives it.
func emitMsg(lsn pglogrepl.LSN, transactional bool, prefix, content string) []byte {
	b := []byte{'M', 0}
	if transactional {
		b[1] = 1
	}
	b = binary.BigEndian.AppendUint64(b, uint64(lsn))
	b = append(append(b, prefix...), 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(content)))
	return append(b, content...)
}

func s(v string) *string { return &v }

// The stream's events.

const outboxOID = 16384

var commitTime = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func data(lsn pglogrepl.LSN, b []byte) replication.Event {
	return replication.Event{Kind: replication.Data, LSN: lsn, Data: b}
}

func keepalive(lsn pglogrepl.LSN) replication.Event {
	return replication.Event{Kind: replication.Keepalive, LSN: lsn}
}

func reset() replication.Event { return replication.Event{Kind: replication.Reset} }

// relation is the outbox's Relation message, as the stream sends it before
// the first row of a connection.
func relation(lsn pglogrepl.LSN) replication.Event {
	return data(lsn, relationMsg(outboxOID, "public", "outbox", outboxCols...))
}

// uuid is the n-th test message id.
func uuid(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }

// row is an outbox row to insert: its id is uuid(n); typ "" is a bad row.
type row struct {
	n   int
	typ string
}

// rowLSN is where row i (from 0) of the transaction at base is written.
func rowLSN(base pglogrepl.LSN, i int) pglogrepl.LSN { return base + 0x10*pglogrepl.LSN(i+1) }

// txn is a transaction's events: Begin at base, row i at rowLSN(base, i),
// its commit record at commit, ending at commit+8 (the position it
// confirms).
func txn(xid uint32, base, commit pglogrepl.LSN, rows ...row) []replication.Event {
	evs := []replication.Event{data(base, beginMsg(commit, commitTime, xid))}
	for i, r := range rows {
		evs = append(evs, insert(rowLSN(base, i), r))
	}
	return append(evs, data(commit+8, commitMsg(commit, commit+8, commitTime)))
}

// insert is the Insert of r into the outbox at lsn.
func insert(lsn pglogrepl.LSN, r row) replication.Event {
	return data(lsn, insertMsg(outboxOID, s(uuid(r.n)), s(r.typ), nil, s(`{"n": 1}`), nil, s("2026-12-02 10:00:00+00")))
}

// batch joins events into one input batch.
func batch(parts ...any) []replication.Event {
	var b []replication.Event
	for _, p := range parts {
		switch p := p.(type) {
		case replication.Event:
			b = append(b, p)
		case []replication.Event:
			b = append(b, p...)
		default:
			panic(fmt.Sprintf("batch: %T", p))
		}
	}
	return b
}
