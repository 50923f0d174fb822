package decoder

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/layout"
)

// OversizedByte starts the message that stands in for a pgoutput message
// larger than postgres.max_message_bytes (docs/design.md, "Messages
// larger than max_message_bytes"). The replication stream reads such a
// message through a Cut, which keeps only its head, and hands the
// decoder the Cut's Message instead; pgoutput never sends this byte.
//
// Its format: OversizedByte, the original message's kind (1 byte) and
// size (uint64), then by kind:
//
//	'M'  flags (1), LSN (8), the prefix and its terminating zero, or its
//	     first MaxCutPrefix bytes without one (a longer prefix)
//	'I'  relation id (4), 'N', column count (2), then each column: 'n' or
//	     'u' alone; 't'/'b', length (4) and value for a value of at most
//	     maxCutValue bytes (while the message stays under maxCutKept);
//	     cutColumn and length (4) for one left out
//	else up to 4 bytes (a relation id)
const OversizedByte = '!'

// OversizedText is in the error of every row or message the relay did
// not read because it is larger than postgres.max_message_bytes: resend
// refuses such a parked row (its values were never read).
const OversizedText = "more than postgres.max_message_bytes"

// MaxCutPrefix is the longest logical message prefix a Cut keeps: longer
// ones are no prefix the relay uses.
const MaxCutPrefix = 1024

const (
	// cutColumn marks a column a Cut left out.
	cutColumn = 'X'
	// maxCutValue is the longest column value a Cut keeps, maxCutKept the
	// most bytes it keeps in all.
	maxCutValue = 4 << 10
	maxCutKept  = 64 << 10
)

// Cut reads one oversized pgoutput message as a stream, keeping only what
// the decoder needs of it (see OversizedByte): the memory it takes is
// bounded by maxCutKept, whatever the message's size. Feed it the
// message's bytes in order; Message returns the stand-in once they are
// all in (or, for a head only, whenever: what is missing is then missing
// from it too). header bytes, when the message comes inside an XLogData,
// are kept in front unchanged.
type Cut struct {
	header int   // bytes in front of the pgoutput message, kept as they are
	left   int64 // bytes of the message (header included) not yet fed
	out    []byte

	// The step waiting for want bytes (tmp gathers them; zero: or up to a
	// zero byte); before it, drop bytes are discarded and keep bytes
	// appended to out.
	step       func(c *Cut, b []byte)
	want       int
	zero       bool
	tmp        []byte
	drop, keep int64
	cols       int
}

// NewCut returns a Cut of a pgoutput message of size bytes, preceded by
// header bytes that are kept (25, an XLogData's header; or 0).
func NewCut(header int, size int64) *Cut {
	c := &Cut{header: header, left: int64(header) + size}
	c.out = make([]byte, 0, 256)
	c.wantN(header+1, func(c *Cut, b []byte) {
		c.out = append(c.out, b[:header]...)
		c.out = append(c.out, OversizedByte, b[header])
		c.out = binary.BigEndian.AppendUint64(c.out, uint64(size))
		switch b[header] {
		case 'M':
			c.wantN(1+8, func(c *Cut, b []byte) {
				c.out = append(c.out, b...)
				c.wantZero(MaxCutPrefix, func(c *Cut, b []byte) { c.out = append(c.out, b...) })
			})
		case 'I':
			c.wantN(4+1+2, func(c *Cut, b []byte) {
				c.out = append(c.out, b...)
				c.cols = int(binary.BigEndian.Uint16(b[5:7]))
				c.column()
			})
		default:
			if size > 1 {
				c.wantN(int(min(4, size-1)), func(c *Cut, b []byte) { c.out = append(c.out, b...) })
			}
		}
	})
	return c
}

func (c *Cut) wantN(n int, step func(*Cut, []byte)) {
	c.want, c.zero, c.step = n, false, step
}

func (c *Cut) wantZero(n int, step func(*Cut, []byte)) {
	c.want, c.zero, c.step = n, true, step
}

// column reads the next column of an Insert's tuple.
func (c *Cut) column() {
	if c.cols == 0 {
		return
	}
	c.cols--
	c.wantN(1, func(c *Cut, b []byte) {
		switch kind := b[0]; kind {
		case 't', 'b':
			c.wantN(4, func(c *Cut, b []byte) {
				n := binary.BigEndian.Uint32(b)
				if n <= maxCutValue && len(c.out)+5+int(n) <= maxCutKept {
					c.out = append(c.out, kind)
					c.out = append(c.out, b...)
					c.keep = int64(n)
				} else {
					c.out = append(c.out, cutColumn)
					c.out = append(c.out, b...)
					c.drop = int64(n)
				}
				c.column()
			})
		default: // 'n', 'u'; anything else the decoder reports
			c.out = append(c.out, kind)
			c.column()
		}
	})
}

// Left returns how many of the message's bytes are still to be fed.
func (c *Cut) Left() int64 { return c.left }

// Feed takes the message's next bytes and returns how many it used: all
// of b, or the bytes left of the message.
func (c *Cut) Feed(b []byte) int {
	used := 0
	for c.left > 0 && used < len(b) {
		avail := b[used:]
		if int64(len(avail)) > c.left {
			avail = avail[:c.left]
		}
		var k int
		switch {
		case c.drop > 0:
			k = int(min(c.drop, int64(len(avail))))
			c.drop -= int64(k)
		case c.keep > 0:
			k = int(min(c.keep, int64(len(avail))))
			c.out = append(c.out, avail[:k]...)
			c.keep -= int64(k)
		case c.step != nil:
			k = min(c.want-len(c.tmp), len(avail))
			done := false
			if c.zero {
				if i := bytes.IndexByte(avail[:k], 0); i >= 0 {
					k, done = i+1, true
				}
			}
			c.tmp = append(c.tmp, avail[:k]...)
			if done || len(c.tmp) == c.want {
				step, t := c.step, c.tmp
				c.step, c.tmp = nil, c.tmp[:0]
				step(c, t) // may set the next step; t is not appended to before it returns
			}
		default: // nothing more is wanted of the message
			k = len(avail)
		}
		used += k
		c.left -= int64(k)
	}
	return used
}

// Message returns the stand-in message (OversizedByte ...), after the
// header bytes.
func (c *Cut) Message() []byte { return c.out }

// CutHead returns the stand-in of a pgoutput message of size bytes of
// which head is the beginning (cdc skip reads only that much of an
// oversized change).
func CutHead(head []byte, size int64) []byte {
	c := NewCut(0, size)
	c.Feed(head)
	return c.Message()
}

// oversized decodes a stand-in message (OversizedByte).
func (d *Decoder) oversized(lsn pglogrepl.LSN, data []byte) (Event, error) {
	if len(data) < 10 {
		return Event{}, fmt.Errorf("%w: short stand-in of an oversized message at %s (%d bytes)", ErrProtocol, lsn, len(data))
	}
	kind, size, rest := data[1], binary.BigEndian.Uint64(data[2:10]), data[10:]
	switch kind {
	case 'M':
		return d.oversizedMessage(lsn, size, rest)
	case 'I':
		if d.envelope != "" {
			return Event{Kind: Skip}, nil
		}
		return d.oversizedInsert(lsn, size, rest)
	case 'B', 'C', 'R':
		// Never this large (a Relation has at most 1,664 columns): the
		// stream cannot go on without it.
		return Event{}, fmt.Errorf("%w: %s message at %s is %d bytes, %s", ErrProtocol, kindNames[kind], lsn, size, OversizedText)
	}
	return Event{Kind: Skip}, nil // Update, Delete, Truncate...: nothing for the relay, as in Decode
}

// oversizedMessage decodes the stand-in of a logical message: one of
// another prefix is what it would have been (Progress when
// non-transactional outside a transaction, else nothing) without its
// content ever being read; one of the relay's own prefix is an *Error.
func (d *Decoder) oversizedMessage(lsn pglogrepl.LSN, size uint64, rest []byte) (Event, error) {
	if len(rest) < 9 {
		return Event{}, fmt.Errorf("%w: stand-in of an oversized logical message at %s truncated", ErrProtocol, lsn)
	}
	transactional := rest[0]&1 == 1
	at := pglogrepl.LSN(binary.BigEndian.Uint64(rest[1:9]))
	p := rest[9:]
	i := bytes.IndexByte(p, 0)
	prefix := ""
	if i >= 0 {
		prefix = string(p[:i])
	}
	tooBig := func(what string) *Error {
		e := &Error{LSN: at, Row: RowValues{"size": strconv.FormatUint(size, 10)},
			Err: fmt.Errorf("%s (prefix %q) is %d bytes, %s: the relay did not read it, so it cannot be published or kept; "+
				"raise postgres.max_message_bytes and restart the relay to publish it, or park it (cdc skip)", what, prefix, size, OversizedText)}
		if d.tx.open {
			e.CommitLSN = d.tx.commitLSN
		}
		return e
	}
	switch {
	case i >= 0 && d.envelope != "" && prefix == d.envelope:
		if transactional && !d.tx.open {
			return Event{}, fmt.Errorf("%w: transactional logical message at %s outside a transaction", ErrProtocol, at)
		}
		e := tooBig("logical message")
		// Its signature cannot be checked on bytes not read: under
		// postgres.message_keys it is parked as a forged one is, so that
		// no role stops the relay with it.
		e.Forged = d.keys != nil
		return Event{}, e
	case !transactional && !d.tx.open:
		return Event{Kind: Progress, LSN: at}, nil
	case transactional && i >= 0 && d.adopt != "" && d.envelope == "" && prefix == d.adopt:
		if d.adoptXids != nil && !d.adoptXids[d.tx.xid] {
			e := tooBig("adopt message")
			e.Forged = true
			return Event{}, e
		}
		e := tooBig("adopt message")
		e.Seq = d.ordinal(at)
		return Event{}, e
	}
	return Event{Kind: Skip}, nil
}

// oversizedInsert decodes the stand-in of an Insert: nothing for another
// table; for the outbox an *Error with the values the Cut kept (its id
// and key when they were among them).
func (d *Decoder) oversizedInsert(lsn pglogrepl.LSN, size uint64, rest []byte) (Event, error) {
	bad := func() (Event, error) {
		return Event{}, fmt.Errorf("%w: stand-in of an oversized Insert at %s malformed", ErrProtocol, lsn)
	}
	if len(rest) < 7 || rest[4] != 'N' {
		return bad()
	}
	rel, ok := d.rels[binary.BigEndian.Uint32(rest[0:4])]
	if !ok {
		return Event{}, fmt.Errorf("%w: Insert at %s for relation %d without a Relation message", ErrProtocol, lsn, binary.BigEndian.Uint32(rest[0:4]))
	}
	if !rel.outbox {
		return Event{Kind: Skip}, nil
	}
	n := int(binary.BigEndian.Uint16(rest[5:7]))
	var vals [layout.NumRoles][]byte
	var nulls, cut [layout.NumRoles]bool
	var big []string
	p := 7
	for ci := 0; ci < n && p < len(rest); ci++ {
		kind := rest[p]
		p++
		var v []byte
		var l uint32
		switch kind {
		case 'n', 'u':
		case 't', 'b', cutColumn:
			if len(rest)-p < 4 {
				return bad()
			}
			l = binary.BigEndian.Uint32(rest[p:])
			p += 4
			if kind != cutColumn {
				if uint64(l) > uint64(len(rest)-p) {
					return bad()
				}
				v = rest[p : p+int(l)]
				p += int(l)
			}
		default:
			return bad()
		}
		for role, idx := range rel.idx {
			if idx == ci {
				vals[role], nulls[role], cut[role] = v, kind == 'n', kind == cutColumn
				if kind == cutColumn {
					big = append(big, fmt.Sprintf("%s %d bytes", d.m.Columns[role], l))
				}
			}
		}
	}
	seq := d.ordinal(lsn)
	id := ""
	if !cut[colID] && vals[colID] != nil && utf8.Valid(vals[colID]) {
		id = string(vals[colID])
	}
	row := RowValues{"size": strconv.FormatUint(size, 10)}
	for role, v := range vals {
		if name := d.m.Columns[role]; v != nil && !nulls[role] && name != "" {
			row[name] = string(v)
		}
	}
	what := ""
	if len(big) > 0 {
		what = fmt.Sprintf(" (%s)", joinList(big))
	}
	e := &Error{LSN: lsn, CommitLSN: d.tx.commitLSN, Seq: seq, ID: id, Row: row,
		Err: fmt.Errorf("the row is %d bytes%s, %s: the relay did not read it; raise postgres.max_message_bytes and restart the relay to publish it, or park it (cdc skip, relay.on_invalid) and publish it later with cdc replay --id", size, what, OversizedText)}
	if !cut[colKey] && (rel.idx[colKey] < 0 || nulls[colKey] || vals[colKey] != nil) {
		e.Key, e.KeyKnown = orderingKey(rel, vals, nulls, id)
	}
	return Event{}, e
}

func joinList(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}
