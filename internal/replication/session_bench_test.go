package replication

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/rs/zerolog"
)

// replayConn replays a catch-up's messages as fast as the session reads
// them (every message already buffered), then breaks. It is lock-free:
// nothing else touches it while the session runs.
type replayConn struct {
	msgs []pgproto3.BackendMessage
	n, i int // messages to return, returned
}

var errReplayed = errors.New("replayed")

func (c *replayConn) ReceiveMessage() (pgproto3.BackendMessage, error) {
	if c.i == c.n {
		return nil, errReplayed
	}
	m := c.msgs[c.i%len(c.msgs)]
	c.i++
	return m, nil
}
func (c *replayConn) SendStatus(pglogrepl.LSN, time.Time) error { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error           { return nil }
func (c *replayConn) Buffered() bool                            { return c.i < c.n }
func (c *replayConn) Close()                                    {}

// BenchmarkSessionCatchUp measures the session's cost per message of a
// catch-up (transactions of 10 rows of ~300 bytes, sent 1 s after their
// commit so that the stream is behind), downstream a consumer that drops
// every batch. One op is one message.
func BenchmarkSessionCatchUp(b *testing.B) {
	msgs := catchUpMsgs()
	cp := &benchConfirmer{}
	s := NewStream(StreamOptions{Log: zerolog.Nop()}, cp)
	out := make(chan []Event, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b := range out {
			cp.confirmed.Store(uint64(b[len(b)-1].LSN))
		}
	}()
	c := &replayConn{msgs: msgs, n: b.N}
	b.ReportAllocs()
	b.ResetTimer()
	err := s.session(context.Background(), context.Background(), out, c, true)
	b.StopTimer()
	close(out)
	<-done
	if !errors.Is(err, errReplayed) {
		b.Fatal(err)
	}
}

// memConn is a net.Conn whose reads replay the wire bytes of msgs in a
// loop until n messages were read, then return io.EOF; writes are
// dropped.
type memConn struct {
	net.Conn // nil: other methods are not called
	wire     []byte
	off      int
	left     int // bytes left to serve
}

func newMemConn(msgs []pgproto3.BackendMessage, n int) *memConn {
	var wire []byte
	var ends []int // wire offset after each message
	for _, m := range msgs {
		wire, _ = m.Encode(wire)
		ends = append(ends, len(wire))
	}
	left := n / len(msgs) * len(wire)
	if r := n % len(msgs); r > 0 {
		left += ends[r-1]
	}
	return &memConn{wire: wire, left: left}
}

func (c *memConn) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.left)], c.wire[c.off:])
	c.off = (c.off + n) % len(c.wire)
	c.left -= n
	return n, nil
}
func (c *memConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *memConn) Close() error                     { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

// BenchmarkSessionCatchUpThroughPgConn is BenchmarkSessionCatchUp with
// the production conn: a *pgconn.PgConn decoding the wire bytes from
// memory.
func BenchmarkSessionCatchUpThroughPgConn(b *testing.B) {
	msgs := catchUpMsgs()
	cfg, err := pgconn.ParseConfig("postgres://x@127.0.0.1/x")
	if err != nil {
		b.Fatal(err)
	}
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		return pgproto3.NewFrontend(newCutReader(r, DefaultMaxMessageBytes, ownWalpost), w)
	}
	mc := newMemConn(msgs, b.N)
	pg, err := pgconn.Construct(&pgconn.HijackedConn{Conn: mc, TxStatus: 'I', Config: cfg, ParameterStatuses: map[string]string{}})
	if err != nil {
		b.Fatal(err)
	}
	cp := &benchConfirmer{}
	s := NewStream(StreamOptions{Log: zerolog.Nop()}, cp)
	out := make(chan []Event, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b := range out {
			cp.confirmed.Store(uint64(b[len(b)-1].LSN))
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	err = s.session(context.Background(), context.Background(), out, newPgConn(pg), true)
	b.StopTimer()
	close(out)
	<-done
	if err == nil || !strings.Contains(err.Error(), "receiving") {
		b.Fatal(err)
	}
}

// catchUpMsgs is a catch-up's messages: transactions of 10 rows of ~300
// bytes, sent 1 s after their commit.
func catchUpMsgs() []pgproto3.BackendMessage {
	var msgs []pgproto3.BackendMessage
	for tx := range 100 {
		start := pglogrepl.LSN(0x1000 * (tx + 1))
		for _, m := range txMsgs(start, start+0x800, 10, 0, 1_000_000) {
			if cd := m.(*pgproto3.CopyData); cd.Data[25] == 'I' {
				cd.Data = append(cd.Data, make([]byte, 260)...)
			}
			msgs = append(msgs, m)
		}
	}
	return msgs
}

// benchConfirmer confirms each batch as the consumer takes it, like a
// relay whose sinks keep up.
type benchConfirmer struct{ confirmed atomic.Uint64 }

func (c *benchConfirmer) Confirmed() pglogrepl.LSN { return pglogrepl.LSN(c.confirmed.Load()) }
func (c *benchConfirmer) Idle() bool               { return false }
