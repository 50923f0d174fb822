package replication

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"

	"github.com/walpost/walpost/internal/decoder"
)

// xlogHeader is the size of an XLogData's header: 'w', WAL start, WAL
// end, send time.
const xlogHeader = 1 + 8 + 8 + 8

// cutReader reads the server's messages for the connection's Frontend and
// passes every one through unchanged, but for a CopyData holding an
// XLogData whose pgoutput message is larger than max bytes, or is a
// logical message larger than foreignCut of a prefix that is not the
// relay's own: that one is read through a decoder.Cut as it arrives and
// replaced by the Cut's stand-in (decoder.OversizedByte), so that neither
// the Frontend nor the stream ever holds it. Memory stays bounded whatever
// logical messages any role emits (docs/design.md, "Messages larger than
// max_message_bytes"). It is the connection's buffered reader too (reads
// of up to readBuffer bytes from the socket), above net.Conn: it only
// frames the protocol's messages.
type cutReader struct {
	r   io.Reader
	max int64
	// own reports whether a logical message's prefix is the relay's
	// (decoder.HeartbeatPrefix, the adopt and envelope prefixes); nil:
	// every prefix is, and only messages over max are cut.
	own func(prefix []byte) bool
	// foreign is the size over which a logical message of a prefix own
	// does not know is cut (foreignCut; tests set less).
	foreign int64
	buf     []byte
	in      []byte // read from r, not yet handed on
	err     error  // r's error, returned once in is used up

	out  []byte // handed on before anything else: a header held back, a stand-in
	pass int64  // bytes of the current message still to hand on
	hdr  []byte // the head of a message held back until it is known whether it passes
	cut  *decoder.Cut
	// cuts counts the messages cut (for tests).
	cuts int
}

// foreignCut is the size over which a logical message of a prefix that is
// not the relay's own is cut whatever max is: the relay only skips such a
// message, so it need not hold it (a role may emit them as large as it
// likes, under max_message_bytes too).
const foreignCut = 64 << 10

// The offsets, in a CopyData message, of an XLogData's pgoutput kind and
// of a logical message's prefix (after its flags and LSN), and the most
// of a message's head that is held back to decide (up to the end of the
// longest prefix a Cut keeps).
const (
	kindAt   = 5 + xlogHeader
	prefixAt = kindAt + 1 + 1 + 8
	holdMax  = prefixAt + decoder.MaxCutPrefix + 1
)

func newCutReader(r io.Reader, max int64, own func(prefix []byte) bool) *cutReader {
	return &cutReader{r: r, max: max, own: own, foreign: foreignCut, buf: make([]byte, readBuffer), hdr: make([]byte, 0, holdMax)}
}

// buffered reports whether the reader holds anything read from r not yet
// handed on: bytes, a header held back, or r's error.
func (c *cutReader) buffered() bool {
	return len(c.in) > 0 || len(c.out) > 0 || len(c.hdr) > 0 || c.err != nil
}

func (c *cutReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(c.out) > 0 {
			k := copy(p[n:], c.out)
			c.out = c.out[k:]
			n += k
			continue
		}
		if len(c.in) == 0 {
			if n > 0 {
				return n, nil
			}
			if errors.Is(c.err, io.EOF) && len(c.hdr) > 0 {
				// The end within a header: hand on what came, for the
				// Frontend to report. (After a timeout, the next read
				// goes on with the header.)
				c.out, c.hdr = append([]byte(nil), c.hdr...), c.hdr[:0]
				continue
			}
			if c.err != nil {
				err := c.err
				c.err = nil
				return 0, err
			}
			m, err := c.r.Read(c.buf)
			c.in, c.err = c.buf[:m], err
			continue
		}
		switch {
		case c.pass > 0:
			k := int(min(c.pass, int64(len(c.in)), int64(len(p)-n)))
			copy(p[n:], c.in[:k])
			c.in = c.in[k:]
			c.pass -= int64(k)
			n += k
		case c.cut != nil:
			c.in = c.in[c.cut.Feed(c.in):]
			if c.cut.Left() == 0 {
				c.out = copyDataMessage(c.cut.Message())
				c.cut = nil
			}
		default:
			c.header()
		}
	}
	return n, nil
}

// header reads the next message's head, as much as decide needs: its
// kind and length, and for a large CopyData the start of its payload. A
// message that may pass goes on whole (c.pass); one to cut starts a Cut.
// The head may come over several reads (it is held back in c.hdr); a
// byte past a message's end is never taken as its own.
func (c *cutReader) header() {
	if len(c.hdr) == 0 {
		// The common case: the head is in one read; nothing is held back.
		switch c.decide(c.in) {
		case passIt:
			c.pass = msgLen(c.in)
			return
		case cutIt:
			c.startCut(c.in[:5])
			c.in = c.in[5:] // the Cut reads the XLogData from its 'w'
			return
		}
	}
	want := 5
	if len(c.hdr) >= 5 {
		want = int(min(holdMax, msgLen(c.hdr)))
	}
	k := min(want-len(c.hdr), len(c.in))
	c.hdr = append(c.hdr, c.in[:k]...)
	c.in = c.in[k:]
	switch c.decide(c.hdr) {
	case passIt:
		c.out = append([]byte(nil), c.hdr...)
		c.pass = msgLen(c.hdr) - int64(len(c.hdr))
		c.hdr = c.hdr[:0]
	case cutIt:
		c.startCut(c.hdr[:5])
		c.cut.Feed(c.hdr[5:])
		c.hdr = c.hdr[:0]
		if c.cut.Left() == 0 {
			c.out = copyDataMessage(c.cut.Message())
			c.cut = nil
		}
	}
}

// verdict is what decide makes of a message's head.
type verdict int

const (
	needMore verdict = iota
	passIt
	cutIt
)

// decide tells from h, the start of a message (and maybe more), whether
// the message passes whole or is cut, or needs more of its head to tell:
// a CopyData holding an XLogData is cut when its pgoutput message is over
// max, or is a logical message over c.foreign whose prefix own does not
// know (or that has none within decoder.MaxCutPrefix bytes).
func (c *cutReader) decide(h []byte) verdict {
	if len(h) < 5 {
		return needMore
	}
	if h[0] != 'd' {
		return passIt
	}
	if n := msgLen(h); int64(len(h)) > n {
		h = h[:n]
	}
	size := msgLen(h) - 5 - xlogHeader // the pgoutput message's size, if it is an XLogData
	over := size > c.max
	if !over && (c.own == nil || size <= c.foreign) {
		return passIt
	}
	if len(h) < 6 {
		return needMore
	}
	if h[5] != 'w' {
		return passIt
	}
	if c.own == nil {
		return cutIt
	}
	if len(h) <= kindAt {
		return needMore
	}
	if h[kindAt] != 'M' {
		if over {
			return cutIt
		}
		return passIt
	}
	p := h[min(prefixAt, len(h)):]
	if i := bytes.IndexByte(p, 0); i >= 0 {
		if !over && c.own(p[:i]) {
			return passIt
		}
		return cutIt
	}
	if len(p) >= decoder.MaxCutPrefix || int64(len(h)) == msgLen(h) {
		return cutIt // no prefix the relay uses
	}
	return needMore
}

// startCut starts reading the XLogData of the CopyData whose header is h
// through a Cut.
func (c *cutReader) startCut(h []byte) {
	c.cut = decoder.NewCut(xlogHeader, int64(binary.BigEndian.Uint32(h[1:5]))-4-xlogHeader)
	c.cuts++
}

// msgLen is the length of the message whose header starts h, kind byte
// included; a length field under 4 (malformed: the Frontend refuses it)
// counts as 4.
func msgLen(h []byte) int64 { return 1 + max(int64(binary.BigEndian.Uint32(h[1:5])), 4) }

// copyDataMessage frames payload as a CopyData message.
func copyDataMessage(payload []byte) []byte {
	b := make([]byte, 5, 5+len(payload))
	b[0] = 'd'
	binary.BigEndian.PutUint32(b[1:5], uint32(4+len(payload)))
	return append(b, payload...)
}
