package pipeline

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/checkpoint"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

// The pipeline's side of the publication or the table changing under the
// relay (docs/design.md, "The publication or the table changing under the
// relay"): it reports what each Relation message is, remembers the ids of
// the last rows the stream carried, and relays the rows that the relay's
// coverage watcher read from the table for a stretch the stream may not
// have carried (a fill), leaving out those the stream carried.

// carriedIDs is how many of the last ids the stream carried the pipeline
// remembers: a fill leaves these out. An id carried before them is sent
// again by a fill whose window reaches back to it (a duplicate, never a
// loss).
const carriedIDs = 1 << 16

// carried is a ring of the last carriedIDs message ids the stream carried
// or a fill relayed. Owned by the pipeline's goroutine.
type carried struct {
	ids  []string
	next int
}

func (c *carried) add(id string) {
	if c.ids == nil {
		c.ids = make([]string, carriedIDs)
	}
	c.ids[c.next] = id
	c.next = (c.next + 1) % carriedIDs
}

func (c *carried) set() map[string]struct{} {
	s := make(map[string]struct{}, len(c.ids))
	for _, id := range c.ids {
		if id != "" {
			s[id] = struct{}{}
		}
	}
	return s
}

// fill is a batch of rows read from the table for the pipeline to relay
// unless the stream carried them. The pipeline answers on done.
type fill struct {
	rows []FillRow
	done chan FillDone
}

// FillRow is one row a fill read from the table: its message, or, for a
// row the decoder could not map, the decoder's error, which the pipeline
// handles as relay.on_invalid says, as it does a bad row of the stream
// (park it, hold its key, or stop at it).
type FillRow struct {
	Msg *message.Message
	Bad *decoder.Error
}

// FillDone is the pipeline's answer to Fill: the transaction the rows it
// relayed are tracked in (nil when it relayed none), how many it relayed
// and how many it left out as carried by the stream.
type FillDone struct {
	Txn     *checkpoint.Txn
	Relayed int
	Carried int
}

// Settled reports whether every delivery of the fill was acknowledged.
func (d FillDone) Settled(t *checkpoint.Tracker) bool {
	return d.Txn == nil || t.Settled(d.Txn)
}

// Wait returns once every delivery of the fill was acknowledged, or with
// ctx's error.
func (d FillDone) Wait(ctx context.Context, t *checkpoint.Tracker) error {
	if d.Txn == nil {
		return nil
	}
	return t.Wait(ctx, d.Txn)
}

// Fill has the pipeline relay rows, read from the outbox table, to the
// sinks their types route to, leaving out those whose id the stream
// carried among the last 65,536 (carriedIDs); a row that could not be
// mapped follows relay.on_invalid (parked, its key held, or the pipeline
// stops with a *StopAtRow whose Fill is set). The pipeline takes them
// between two of the stream's transactions; Fill returns its answer once
// it handed them to the sinks (FillDone.Settled tells when they are
// acknowledged), or ctx's error. Their positions are set to just before
// the last point the pipeline handled (Handled). Called from one
// goroutine at a time.
func (p *Pipeline) Fill(ctx context.Context, rows []FillRow) (FillDone, error) {
	f := &fill{rows: rows, done: make(chan FillDone, 1)}
	select {
	case p.fills <- f:
	case <-ctx.Done():
		return FillDone{}, ctx.Err()
	}
	select {
	case d := <-f.done:
		return d, nil
	case <-ctx.Done():
		return FillDone{}, ctx.Err()
	}
}

// Handled returns the end of the last commit or progress point the
// pipeline handled: every transaction that committed before it was
// decoded. Safe for concurrent use.
func (p *Pipeline) Handled() pglogrepl.LSN { return p.pos.get() }

// position is the end of the last commit or progress point the pipeline
// handled: every transaction that committed before it was decoded.
type position struct{ v atomic.Uint64 }

func (p *position) raise(lsn pglogrepl.LSN) {
	for {
		old := p.v.Load()
		if uint64(lsn) <= old || p.v.CompareAndSwap(old, uint64(lsn)) {
			return
		}
	}
}

func (p *position) get() pglogrepl.LSN { return pglogrepl.LSN(p.v.Load()) }

// relationSeen reports a Relation message that is not plainly the outbox:
// a relation that is not the outbox (error, once per relation and
// process, counted), the outbox renamed or created again, or its columns
// renamed and mapped by position (warnings).
func (p *Pipeline) relationSeen(n *decoder.RelationNote) {
	switch {
	case n.Foreign:
		if p.foreign == nil {
			p.foreign = map[uint32]bool{}
		}
		if p.foreign[n.OID] {
			return
		}
		p.foreign[n.OID] = true
		p.metrics.ForeignRelations.Inc()
		p.log.Error().Str("relation", n.Name).Uint32("oid", n.OID).
			Msg("a relation that is not the outbox is in the replication stream: the publication publishes other tables; its rows are skipped (they are not outbox rows). Remove it from the publication (ALTER PUBLICATION ... DROP TABLE)")
	case n.Positional:
		p.log.Warn().Str("relation", n.Name).Uint32("oid", n.OID).Str("columns", n.Columns).
			Msg("the outbox's columns were renamed; its columns keep their types and places, so they are mapped by position")
	case n.Renamed:
		p.log.Warn().Str("relation", n.Name).Uint32("oid", n.OID).
			Msg("the outbox table was renamed; it is the same table (same OID), its rows are still relayed. cdc run does not start while postgres.table names no table")
	case n.Recreated:
		p.log.Warn().Str("relation", n.Name).Uint32("oid", n.OID).
			Msg("a table of the outbox's name with another OID than at start (created again): its rows are relayed")
	}
}

// doFill relays f's rows the stream did not carry as one transaction of
// the tracker, between two of the stream's transactions (no transaction
// may be open). They confirm up to the last position the pipeline handled,
// and carry the position just before it, so that neither the slot nor a
// sink's progress moves back or past anything.
func (p *Pipeline) doFill(ctx context.Context, f *fill) error {
	seen := p.carried.set()
	var d FillDone
	pos := p.pos.get()
	at := pos
	if at > 0 {
		at-- // the rows' position for the sinks' progress (store.Position)
	}
	for _, r := range f.rows {
		if de := r.Bad; de != nil {
			if _, ok := seen[de.ID]; ok && de.ID != "" {
				d.Carried++
				continue
			}
			// Parked at the fill's position with a seq of its own, as a
			// held row of a fill is.
			p.fillSeq++
			de.LSN, de.CommitLSN, de.Seq = at, at, p.fillSeq
			if err := p.invalid(ctx, de, true); err != nil {
				return err
			}
			if de.ID != "" {
				p.carried.add(de.ID)
			}
			continue
		}
		m := r.Msg
		if _, ok := seen[m.ID]; ok {
			d.Carried++
			continue
		}
		if p.held.holds(m, true) {
			// Parked at the fill's position with a seq of its own, so
			// that two held rows of a fill do not share a dead-letter key.
			seq := m.Seq
			p.fillSeq++
			m.LSN, m.CommitLSN, m.Seq = at, at, p.fillSeq
			held, err := p.held.hold(ctx, m)
			if err != nil {
				return err
			}
			if held {
				p.carried.add(m.ID)
				d.Relayed++
				continue
			}
			m.Seq = seq // the key was released: relayed as any fill row
		}
		p.targets = p.targets[:0]
		for i := range p.routes {
			if p.routes[i].Matches(m.Type) {
				p.targets = append(p.targets, i)
			}
		}
		if len(p.targets) == 0 {
			continue
		}
		m, err := p.unlessExpired(ctx, m)
		if err != nil {
			return err
		}
		if m == nil {
			p.carried.add(r.Msg.ID)
			continue
		}
		if d.Txn == nil {
			d.Txn = p.tracker.Begin()
		}
		// Just before pos: a transaction whose commit record starts at a
		// keepalive's position must not count as acknowledged with them.
		m.LSN, m.CommitLSN = at, at
		if err := p.deliver(ctx, publish.Delivery{Msg: m, Txn: d.Txn}); err != nil {
			return err
		}
		p.carried.add(m.ID) // relayed: a later fill leaves it out too
		d.Relayed++
	}
	if d.Txn != nil {
		p.tracker.Commit(d.Txn, pos)
	}
	if err := p.flush(ctx); err != nil {
		return err
	}
	f.done <- d // buffered
	return nil
}

// FillRows are the FillRows of msgs, rows that all mapped.
func FillRows(msgs []*message.Message) []FillRow {
	rows := make([]FillRow, len(msgs))
	for i, m := range msgs {
		rows[i].Msg = m
	}
	return rows
}
