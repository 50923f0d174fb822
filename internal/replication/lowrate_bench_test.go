package replication

import (
	"context"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/rs/zerolog"
)

// trickleConn is a memConn whose messages come one at a time, each
// followed by an empty socket: a read returns one message's bytes, the
// next a timeout (the poll before the batch goes downstream, which finds
// nothing), as at 1,000 single-row transactions/s, where Begin, Insert and
// Commit arrive apart. The timeout is one preallocated error (rawnet's
// own allocation is below net.Conn and not measured here).
type trickleConn struct {
	*memConn
	ends  []int // wire offset after each message, in one loop of wire
	next  int   // index into ends of the message to serve
	empty bool  // the next read finds the socket empty
}

var errTrickleTimeout = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

func (c *trickleConn) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	if c.empty {
		c.empty = false
		return 0, errTrickleTimeout
	}
	start := 0
	if c.next > 0 {
		start = c.ends[c.next-1]
	}
	n := copy(p, c.wire[start:c.ends[c.next]])
	c.left -= n
	c.next = (c.next + 1) % len(c.ends)
	c.empty = true
	return n, nil
}

// BenchmarkSessionTrickleThroughPgConn measures the stream's cost per
// message at low rates (single-row transactions, each message alone,
// each followed by an empty poll), through the production conn over
// pgconn. One op is one message; allocs/op is what the stream allocates
// per message above the socket.
func BenchmarkSessionTrickleThroughPgConn(b *testing.B) {
	var msgs []pgproto3.BackendMessage
	for tx := range 100 {
		start := pglogrepl.LSN(0x1000 * (tx + 1))
		msgs = append(msgs, txMsgs(start, start+0x800, 1, 0, 0)...)
	}
	cfg, err := pgconn.ParseConfig("postgres://x@127.0.0.1/x")
	if err != nil {
		b.Fatal(err)
	}
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		return pgproto3.NewFrontend(newCutReader(r, DefaultMaxMessageBytes, ownWalpost), w)
	}
	mc := &trickleConn{memConn: newMemConn(msgs, b.N)}
	for _, m := range msgs {
		end := 0
		if len(mc.ends) > 0 {
			end = mc.ends[len(mc.ends)-1]
		}
		w, _ := m.Encode(nil)
		mc.ends = append(mc.ends, end+len(w))
	}
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
