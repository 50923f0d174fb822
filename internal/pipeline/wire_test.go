package pipeline

import (
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/pgwiretest"
	"github.com/walpost/walpost/internal/replication"
)

// The pgoutput messages are built by internal/pgwiretest; here are the
// stream's events around them.

type col = pgwiretest.Col

const (
	oidText  = pgwiretest.OIDText
	oidJSONB = pgwiretest.OIDJSONB
	oidUUID  = pgwiretest.OIDUUID
)

var (
	s          = pgwiretest.Str
	outboxCols = pgwiretest.OutboxCols
)

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
	return data(lsn, pgwiretest.Relation(outboxOID, "public", "outbox", outboxCols...))
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
	evs := []replication.Event{data(base, pgwiretest.Begin(commit, commitTime, xid))}
	for i, r := range rows {
		evs = append(evs, insert(rowLSN(base, i), r))
	}
	return append(evs, data(commit+8, pgwiretest.Commit(commit, commit+8, commitTime)))
}

// insert is the Insert of r into the outbox at lsn.
func insert(lsn pglogrepl.LSN, r row) replication.Event {
	return data(lsn, pgwiretest.Insert(outboxOID, s(uuid(r.n)), s(r.typ), nil, s(`{"n": 1}`), nil, s("2026-12-02 10:00:00+00")))
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
