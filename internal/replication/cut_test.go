package replication

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/walpost/walpost/internal/decoder"
)

// backendMsg frames body as a backend message of kind.
func backendMsg(kind byte, body []byte) []byte {
	b := []byte{kind, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
	return append(b, body...)
}

// xlogData is an XLogData at lsn carrying a pgoutput message.
func xlogData(lsn uint64, msg []byte) []byte {
	b := []byte{'w'}
	b = binary.BigEndian.AppendUint64(b, lsn)
	b = binary.BigEndian.AppendUint64(b, lsn)
	b = binary.BigEndian.AppendUint64(b, 42)
	return append(b, msg...)
}

func emitted(transactional bool, prefix string, content []byte) []byte {
	b := []byte{'M', 0}
	if transactional {
		b[1] = 1
	}
	b = binary.BigEndian.AppendUint64(b, 0x99)
	b = append(append(b, prefix...), 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(content)))
	return append(b, content...)
}

// cutStream is a backend stream of small and oversized (over max)
// messages, and the CopyData payloads the Frontend must get from it
// through a cutReader.
func cutStream(max int) (stream []byte, want [][]byte) {
	big := bytes.Repeat([]byte("z"), 3*max)
	insert := []byte{'I', 0, 0, 0, 1, 'N', 0, 2, 't', 0, 0, 0, 2, 'i', 'd'}
	insert = append(binary.BigEndian.AppendUint32(append(insert, 't'), uint32(len(big))), big...)
	keepalive := append(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64([]byte{'k'}, 7), 9), 0)
	for _, m := range []struct {
		kind   byte
		body   []byte
		cutMsg []byte // the pgoutput message, when the CopyData is cut
	}{
		{kind: 'd', body: keepalive},
		{kind: 'd', body: xlogData(1, []byte("B0123456789abcdefghij"))},
		{kind: 'd', body: xlogData(2, emitted(false, "attacker", big)), cutMsg: emitted(false, "attacker", big)},
		{kind: 'd', body: xlogData(3, emitted(true, "walpost", big[:max-30]))}, // just under the limit: passes
		{kind: 'd', body: append([]byte{'x'}, big...)},                         // not an XLogData: passes whole
		{kind: 'd', body: xlogData(4, insert), cutMsg: insert},
		{kind: 'c'}, // CopyDone: a message of 5 bytes, the next starts right after
		{kind: 'd', body: keepalive},
	} {
		stream = append(stream, backendMsg(m.kind, m.body)...)
		if m.kind != 'd' {
			continue
		}
		if m.cutMsg == nil {
			want = append(want, m.body)
			continue
		}
		want = append(want, append(append([]byte(nil), m.body[:xlogHeader]...), decoder.CutHead(m.cutMsg, int64(len(m.cutMsg)))...))
	}
	return stream, want
}

// chunkReader returns at most n bytes per Read (1 + a random size below
// n when random is set).
type chunkReader struct {
	b      []byte
	n      int
	random *rand.Rand
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := r.n
	if r.random != nil {
		n = 1 + r.random.IntN(r.n)
	}
	n = copy(p[:min(n, len(p))], r.b)
	r.b = r.b[n:]
	return n, nil
}

// receiveAll reads every CopyData payload through a Frontend.
func receiveAll(t *testing.T, r io.Reader) [][]byte {
	t.Helper()
	fe := pgproto3.NewFrontend(r, io.Discard)
	var got [][]byte
	for {
		msg, err := fe.Receive()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		if cd, ok := msg.(*pgproto3.CopyData); ok {
			got = append(got, bytes.Clone(cd.Data))
		}
	}
}

// TestCutReaderReplacesOnlyOversizedXLogData: through a cutReader the
// Frontend gets every message as sent but the XLogData whose pgoutput
// message is over the limit, which comes as its stand-in, however the
// socket's reads split the stream.
func TestCutReaderReplacesOnlyOversizedXLogData(t *testing.T) {
	const max = 1 << 16
	stream, want := cutStream(max)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, src := range []*chunkReader{
		{b: stream, n: len(stream)}, {b: stream, n: 1}, {b: stream, n: 6}, {b: stream, n: 4096, random: rng}, {b: stream, n: 7, random: rng},
	} {
		cr := newCutReader(src, max, nil)
		got := receiveAll(t, cr)
		if len(got) != len(want) {
			t.Fatalf("reads of %d: %d CopyData messages, want %d", src.n, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("reads of %d: CopyData %d: %d bytes %q..., want %d bytes %q...", src.n, i, len(got[i]), got[i][:min(40, len(got[i]))], len(want[i]), want[i][:min(40, len(want[i]))])
			}
		}
		if cr.cuts != 2 {
			t.Fatalf("reads of %d: %d messages cut, want 2", src.n, cr.cuts)
		}
	}
}

// ownWalpost is the own function of a relay whose prefix is "walpost".
func ownWalpost(p []byte) bool { return string(p) == "walpost" }

// TestCutReaderReadsPastForeignMessagesUnderTheLimit: with the relay's
// prefixes known, a logical message of another prefix is cut once it is
// over foreignCut, under the limit too; one of the relay's own prefix up
// to the limit, a small one of another prefix, and an Insert under the
// limit pass whole; a prefix longer than any the relay uses is cut; over
// the limit everything is cut, as before; however the reads split it.
func TestCutReaderReadsPastForeignMessagesUnderTheLimit(t *testing.T) {
	const max = 1 << 20
	under := bytes.Repeat([]byte("u"), 4*foreignCut)
	over := bytes.Repeat([]byte("o"), max+1)
	long := strings.Repeat("p", decoder.MaxCutPrefix+10)
	insert := func(v []byte) []byte {
		b := []byte{'I', 0, 0, 0, 1, 'N', 0, 1, 't'}
		return append(binary.BigEndian.AppendUint32(b, uint32(len(v))), v...)
	}
	var stream []byte
	var want [][]byte
	for i, m := range []struct {
		msg []byte
		cut bool
	}{
		{emitted(false, "attacker", under), true},
		{emitted(true, "walpost", under), false},
		{emitted(false, "attacker", under[:foreignCut/2]), false},
		{emitted(true, long, under), true},
		{emitted(true, "walpost", over), true},
		{insert(under), false},
		{insert(over), true},
		{emitted(false, "attacker", under), true},
	} {
		body := xlogData(uint64(i+1), m.msg)
		stream = append(stream, backendMsg('d', body)...)
		if m.cut {
			body = append(append([]byte(nil), body[:xlogHeader]...), decoder.CutHead(m.msg, int64(len(m.msg)))...)
		}
		want = append(want, body)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, src := range []*chunkReader{
		{b: stream, n: len(stream)}, {b: stream, n: 1}, {b: stream, n: 41}, {b: stream, n: 4096, random: rng}, {b: stream, n: 900, random: rng},
	} {
		cr := newCutReader(src, max, ownWalpost)
		got := receiveAll(t, cr)
		if len(got) != len(want) {
			t.Fatalf("reads of %d: %d CopyData messages, want %d", src.n, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("reads of %d: CopyData %d: %d bytes %q..., want %d bytes %q...", src.n, i, len(got[i]), got[i][:min(60, len(got[i]))], len(want[i]), want[i][:min(60, len(want[i]))])
			}
		}
		if cr.cuts != 5 {
			t.Fatalf("reads of %d: %d messages cut, want 5", src.n, cr.cuts)
		}
	}
}

// lazyMessage is a reader of one CopyData holding an XLogData whose
// logical message has n bytes of content, made as it is read.
type lazyMessage struct {
	head []byte
	n    int64
}

func (l *lazyMessage) Read(p []byte) (int, error) {
	if len(l.head) > 0 {
		k := copy(p, l.head)
		l.head = l.head[k:]
		return k, nil
	}
	if l.n == 0 {
		return 0, io.EOF
	}
	k := int(min(int64(len(p)), l.n))
	for i := range p[:k] {
		p[i] = 'q'
	}
	l.n -= int64(k)
	return k, nil
}

// TestCutReaderTakesAGiantMessageInBoundedMemory: a 512 MiB logical
// message goes through the cutReader and the Frontend allocating a few
// MiB, not its size.
func TestCutReaderTakesAGiantMessageInBoundedMemory(t *testing.T) {
	const n = 512 << 20
	msg := emitted(false, "attacker", nil) // content length patched below
	binary.BigEndian.PutUint32(msg[len(msg)-4:], n)
	body := xlogData(5, msg)
	head := []byte{'d', 0, 0, 0, 0}
	binary.BigEndian.PutUint32(head[1:], uint32(4+len(body)+n))
	src := &lazyMessage{head: append(head, body...), n: n}

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got := receiveAll(t, newCutReader(src, DefaultMaxMessageBytes, ownWalpost))
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Fatalf("reading a %d MiB message allocated %d MiB", n>>20, alloc>>20)
	}
	if len(got) != 1 || got[0][xlogHeader] != decoder.OversizedByte {
		t.Fatalf("got %d messages, want the stand-in", len(got))
	}
	d := decoder.New(decoder.Mapping{Schema: "public", Name: "outbox"})
	if ev, err := d.Decode(5, got[0][xlogHeader:]); err != nil || ev.Kind != decoder.Progress || ev.LSN != 0x99 {
		t.Fatalf("Decode of the stand-in: %+v, %v; want Progress at the message's LSN", ev, err)
	}
}

// FuzzCutReader: for any stream and any read sizes, the cutReader hands
// on exactly what it gets when nothing in it is over the limit, and the
// same bytes whatever the read sizes otherwise; it never panics.
func FuzzCutReader(f *testing.F) {
	stream, _ := cutStream(64)
	f.Add(stream, uint8(5), uint16(64))
	f.Add([]byte{'d', 0, 0, 0, 40, 'w'}, uint8(1), uint16(1))
	f.Add(backendMsg('d', xlogData(1, emitted(false, "attacker", bytes.Repeat([]byte("a"), 40)))), uint8(3), uint16(200))
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint8, max uint16) {
		// With the relay's prefixes known (foreign messages over a
		// quarter of max cut), and without.
		for _, own := range []func([]byte) bool{nil, ownWalpost} {
			reader := func(n int) *cutReader {
				cr := newCutReader(&chunkReader{b: stream, n: n}, int64(max), own)
				cr.foreign = int64(max) / 4
				return cr
			}
			read := func(n int) []byte {
				b, err := io.ReadAll(reader(n))
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			whole, pieces := read(len(stream)+1), read(int(chunk)+1)
			if !bytes.Equal(whole, pieces) {
				t.Fatalf("read whole: %q; in pieces of %d: %q", whole, int(chunk)+1, pieces)
			}
			cr := reader(len(stream) + 1)
			if b, _ := io.ReadAll(cr); cr.cuts == 0 && !bytes.Equal(b, stream) {
				t.Fatalf("nothing cut, but %q became %q", stream, b)
			}
		}
	})
}
