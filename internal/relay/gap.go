package relay

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
// the last rows the stream carried, and relays the rows that the coverage
// watcher read from the table for a stretch the stream may not have
// carried (a fill), leaving out those the stream carried.

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
// unless the stream carried them. The pipeline answers on done with the
// transaction the relayed ones are tracked in (nil when it relayed none)
// and how many it left out as carried.
type fill struct {
	msgs []*message.Message
	done chan fillDone
}

type fillDone struct {
	txn     *checkpoint.Txn
	relayed int
	carried int
}

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
func (p *pipeline) relationSeen(n *decoder.RelationNote) {
	switch {
	case n.Foreign:
		if p.foreign == nil {
			p.foreign = map[uint32]bool{}
		}
		if p.foreign[n.OID] {
			return
		}
		p.foreign[n.OID] = true
		p.metrics.foreignRelations.Inc()
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
func (p *pipeline) doFill(ctx context.Context, f *fill) error {
	seen := p.carried.set()
	var d fillDone
	pos := p.pos.get()
	at := pos
	if at > 0 {
		at-- // the rows' position for the sinks' progress (store.Position)
	}
	for _, m := range f.msgs {
		if _, ok := seen[m.ID]; ok {
			d.carried++
			continue
		}
		p.targets = p.targets[:0]
		for i := range p.routes {
			if p.routes[i].Route.Matches(m.Type) {
				p.targets = append(p.targets, i)
			}
		}
		if len(p.targets) == 0 {
			continue
		}
		if d.txn == nil {
			d.txn = p.tracker.Begin()
		}
		// Just before pos: a transaction whose commit record starts at a
		// keepalive's position must not count as acknowledged with them.
		m.LSN, m.CommitLSN = at, at
		n := len(p.targets)
		size := int64(n * m.Size())
		if !p.window.TryAcquire(n, size) {
			if err := p.flush(ctx); err != nil {
				return err
			}
			if err := p.window.Acquire(ctx, n, size); err != nil {
				return err
			}
		}
		p.tracker.Add(d.txn, n)
		p.carried.add(m.ID) // relayed: a later fill leaves it out too
		del := publish.Delivery{Msg: m, Tag: d.txn}
		for _, i := range p.targets {
			p.out[i] = append(p.out[i], del)
		}
		d.relayed++
	}
	if d.txn != nil {
		p.tracker.Commit(d.txn, pos)
	}
	if err := p.flush(ctx); err != nil {
		return err
	}
	f.done <- d // buffered
	return nil
}

// fillSettled reports whether every delivery of a fill's transaction was
// acknowledged.
func fillSettled(t *checkpoint.Tracker, d fillDone) bool {
	return d.txn == nil || t.Settled(d.txn)
}
