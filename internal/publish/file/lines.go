package file

import (
	"encoding/base64"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/envelope"
)

// lines are a batch's lines, in the format env says, ready to write: a
// buffer of the lines, less the large payloads (raw format: see
// publish.AppendJSONLineOut), which are written from the messages, so that a
// large message is not copied into a line first.
type lines struct {
	buf  []byte
	outs []outPayload
}

// outPayload is a payload left out of lines.buf: it goes at buf[at:].
type outPayload struct {
	at  int
	p   []byte
	b64 bool // p goes in base64
}

// build makes the lines of msgs, dropping the previous ones.
func (l *lines) build(msgs []*message.Message, env *envelope.Settings) {
	l.buf, l.outs = l.buf[:0], l.outs[:0]
	if env.IsCloudEvents() {
		for _, m := range msgs {
			l.buf = publish.AppendCloudEventLine(l.buf, m, env)
		}
		return
	}
	for _, m := range msgs {
		var at int
		var b64, out bool
		l.buf, at, b64, out = publish.AppendJSONLineOut(l.buf, m)
		if out {
			l.outs = append(l.outs, outPayload{at: at, p: m.Payload, b64: b64})
		}
	}
}

// writeTo writes the lines with write, which writes all of b or fails
// (as os.File.Write does), and returns the bytes written.
func (l *lines) writeTo(write func(b []byte) (int, error)) (int, error) {
	n, at := 0, 0
	for _, o := range l.outs {
		k, err := write(l.buf[at:o.at])
		n += k
		if err != nil {
			return n, err
		}
		at = o.at
		if o.b64 {
			k, err = writeBase64(write, o.p)
		} else {
			k, err = write(o.p)
		}
		n += k
		if err != nil {
			return n, err
		}
	}
	k, err := write(l.buf[at:])
	return n + k, err
}

// writeBase64 writes p in standard base64, a piece at a time.
func writeBase64(write func(b []byte) (int, error), p []byte) (int, error) {
	const piece = 48 << 10 // a multiple of 3: no padding but at the end
	buf := make([]byte, 0, base64.StdEncoding.EncodedLen(piece))
	n := 0
	for len(p) > 0 {
		k := min(len(p), piece)
		w, err := write(base64.StdEncoding.AppendEncode(buf[:0], p[:k]))
		n += w
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// release drops the written lines: the payloads they refer to, and a huge
// batch's buffer.
func (l *lines) release() {
	clear(l.outs)
	l.outs = l.outs[:0]
	if cap(l.buf) > 4<<20 {
		l.buf = nil
	}
}
