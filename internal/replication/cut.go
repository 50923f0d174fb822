package replication

import (
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
// XLogData whose pgoutput message is larger than max bytes: that one is
// read through a decoder.Cut as it arrives and replaced by the Cut's
// stand-in (decoder.OversizedByte), so that neither the Frontend nor the
// stream ever holds it. Memory stays bounded whatever size of logical
// message any role emits (docs/design.md, "Messages larger than
// max_message_bytes"). It is the connection's buffered reader too (reads
// of up to readBuffer bytes from the socket), above net.Conn: it only
// frames the protocol's messages.
type cutReader struct {
	r   io.Reader
	max int64
	buf []byte
	in  []byte // read from r, not yet handed on
	err error  // r's error, returned once in is used up

	out  []byte // handed on before anything else: a header held back, a stand-in
	pass int64  // bytes of the current message still to hand on
	hdr  []byte // a message header split over two reads
	cut  *decoder.Cut
	// cuts counts the messages cut (for tests).
	cuts int
}

func newCutReader(r io.Reader, max int64) *cutReader {
	return &cutReader{r: r, max: max, buf: make([]byte, readBuffer), hdr: make([]byte, 0, 5+xlogHeader+1)}
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

// header reads the next message's header: its kind and length, and for a
// large CopyData the first byte of its payload, which says whether it is
// an XLogData. A message that may pass goes on whole (c.pass); an
// oversized XLogData starts a Cut. The header may come over several
// reads; a byte past a message's end is never taken as its own.
func (c *cutReader) header() {
	if len(c.hdr) == 0 && len(c.in) >= 6 {
		// The common case: the header is in one read; nothing is held back.
		if !c.oversized(c.in[:5]) || c.in[5] != 'w' {
			c.pass = msgLen(c.in)
			return
		}
		c.startCut(c.in[:5])
		c.in = c.in[5:] // the Cut reads the XLogData from its 'w'
		return
	}
	need := 5
	if len(c.hdr) == 5 {
		need = 6 // an oversized CopyData: is it an XLogData?
	}
	k := min(need-len(c.hdr), len(c.in))
	c.hdr = append(c.hdr, c.in[:k]...)
	c.in = c.in[k:]
	switch {
	case len(c.hdr) < 5:
	case len(c.hdr) == 5 && !c.oversized(c.hdr):
		c.passHeld()
	case len(c.hdr) == 6 && c.hdr[5] == 'w':
		c.startCut(c.hdr[:5])
		c.cut.Feed(c.hdr[5:6])
		c.hdr = c.hdr[:0]
	case len(c.hdr) == 6:
		c.passHeld()
	}
}

// oversized reports whether the message header h (5 bytes) is that of a
// CopyData too large to pass if it is an XLogData.
func (c *cutReader) oversized(h []byte) bool {
	return h[0] == 'd' && int64(binary.BigEndian.Uint32(h[1:5]))-4 > c.max+xlogHeader
}

// startCut starts reading the XLogData of the CopyData whose header is h
// through a Cut.
func (c *cutReader) startCut(h []byte) {
	c.cut = decoder.NewCut(xlogHeader, int64(binary.BigEndian.Uint32(h[1:5]))-4-xlogHeader)
	c.cuts++
}

// passHeld hands on the held header bytes and the rest of their message.
func (c *cutReader) passHeld() {
	c.out = append([]byte(nil), c.hdr...)
	c.pass = msgLen(c.hdr) - int64(len(c.hdr))
	c.hdr = c.hdr[:0]
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
