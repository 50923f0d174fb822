package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/rawnet"
)

// conn is what a session needs of a replication connection on which
// START_REPLICATION succeeded: the protocol I/O, and nothing else. It is
// used by one goroutine, except SetReadDeadline, which is safe to call
// from any goroutine (the session wakes its read that way when its
// context ends).
type conn interface {
	// ReceiveMessage returns the next message from the server. When the
	// read deadline passes first it returns errReadDeadline, and the
	// connection stays usable: a message cut by the deadline is resumed
	// by the next call. Any other error ends the connection.
	ReceiveMessage() (pgproto3.BackendMessage, error)
	// SendStatus sends a standby status update with write = flush =
	// apply = lsn (never 0 for flush or apply unless lsn is 0) and
	// clientTime, asking for no reply.
	SendStatus(lsn pglogrepl.LSN, clientTime time.Time) error
	// SetReadDeadline sets the time after which ReceiveMessage returns
	// errReadDeadline; a time in the past makes it return at once unless
	// a message is buffered, the zero time waits without limit.
	SetReadDeadline(t time.Time) error
	// Buffered reports whether bytes of the server's are read from the
	// socket and wait in the connection (a message, or part of one): a
	// ReceiveMessage then returns without waiting for the socket, or
	// only for the rest of a message.
	Buffered() bool
	// Close closes the connection.
	Close()
}

// dialFunc connects and starts replication at resume (0: the slot's
// confirmed position). Its errors are classified like those of
// Stream.connect: errSlotActive, fatalError, or worth a retry.
type dialFunc func(ctx context.Context, resume pglogrepl.LSN) (conn, error)

// errReadDeadline is returned by conn.ReceiveMessage when the read
// deadline passed.
var errReadDeadline = errors.New("replication: read deadline reached")

var errSlotActive = errors.New("replication: slot is active in another process")

type fatalError struct{ error }

func (e fatalError) Unwrap() error { return e.error }

func isFatal(err error) bool {
	var f fatalError
	return errors.As(err, &f)
}

// pgConn is the production conn: a *pgconn.PgConn in replication mode.
type pgConn struct {
	pg  *pgconn.PgConn
	cut *cutReader // between the socket and pg's Frontend; nil in tests that dial pgconn themselves
	net net.Conn
	raw *rawnet.Conn // the socket under net; nil where it is read through net.Conn
	rb  receiveBuffer
	// broken: a read failed with something other than a timeout.
	broken bool
}

func newPgConn(pg *pgconn.PgConn) *pgConn {
	nc := pg.Conn()
	return &pgConn{pg: pg, net: nc, raw: rawnet.Of(nc)}
}

// ReceiveMessage reads the next message from the connection's Frontend
// directly, as pglogrepl sends status updates through it, rather than
// through PgConn.ReceiveMessage: once replication has started, pgconn's
// bookkeeping there (its lock, the parameter statuses and notices of a
// query, notices) does nothing the stream needs, while
// a read that found nothing cost three allocations and a reflective
// errors.As in its error wrapping, and the stream makes such a read at
// nearly every wake-up at low rates (the poll before a batch goes
// downstream; docs/design.md, "The hot path"). On any error but a
// timeout pgconn would close the connection at once; the session closes
// it on such an error anyway, and Close bounds the goodbye on a broken
// one.
func (c *pgConn) ReceiveMessage() (pgproto3.BackendMessage, error) {
	msg, err := c.pg.Frontend().Receive()
	if err != nil {
		if isTimeout(err) {
			return nil, errReadDeadline
		}
		c.broken = true
		return nil, fmt.Errorf("receive message failed: %w", err)
	}
	if e, ok := msg.(*pgproto3.ErrorResponse); ok && strings.EqualFold(e.Severity, "FATAL") {
		// As pgconn's default OnPgError: a FATAL error (the server ends
		// the connection: pg_terminate_backend, a shutdown) is the
		// connection's failure, to reconnect from, not the stream's.
		c.broken = true
		return nil, fmt.Errorf("receive message failed: %w", pgconn.ErrorResponseToPgError(e))
	}
	return msg, nil
}

// isTimeout reports whether an error in err's chain is a timeout, as
// pgconn.Timeout does (pgconn wraps the socket's timeout), without its
// allocations: errors.As took two per call, and the stream meets a timeout
// after nearly every message at low rates (the read that finds the socket
// empty before the batch goes downstream).
func isTimeout(err error) bool {
	for err != nil {
		if t, ok := err.(interface{ Timeout() bool }); ok && t.Timeout() {
			return true
		}
		err = errors.Unwrap(err)
	}
	return false
}

func (c *pgConn) SendStatus(lsn pglogrepl.LSN, clientTime time.Time) error {
	return pglogrepl.SendStandbyStatusUpdate(context.Background(), c.pg, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: lsn, WALFlushPosition: lsn, WALApplyPosition: lsn, ClientTime: clientTime,
	})
}

// SetReadDeadline sets the read deadline. On a rawnet.Conn, pastDeadline
// (which the reading goroutine sets between reads, never to wake a read)
// makes reads take only what is there without touching the socket's
// deadline, and other deadlines are set on the socket only when they
// change: no runtime timer is removed and added back per message.
func (c *pgConn) SetReadDeadline(t time.Time) error {
	switch {
	case c.raw == nil:
		return c.net.SetReadDeadline(t)
	case t.Equal(pastDeadline):
		c.raw.Expire()
		return nil
	}
	return c.raw.SetReadDeadlineOnce(t)
}

// Close says goodbye (Terminate) and closes the connection. After a
// failed read the goodbye may wait at most closeWait, as pgconn's own
// close of a failed connection does: the socket may be half dead.
func (c *pgConn) Close() {
	if c.broken {
		_ = c.net.SetDeadline(time.Now().Add(closeWait))
	}
	c.pg.Close(context.Background())
}

// closeWait bounds the goodbye on a connection whose read failed.
const closeWait = time.Second

// receiveBuffer reports how the socket's receive buffer was sized (for
// the session's log line).
func (c *pgConn) receiveBuffer() receiveBuffer { return c.rb }

// Buffered implements conn: what pgproto3 read ahead, and what the
// cutReader holds.
func (c *pgConn) Buffered() bool {
	return c.pg.Frontend().ReadBufferLen() > 0 || c.cut != nil && c.cut.buffered()
}

// connect opens a replication connection and starts replication on the
// slot at resume (0: the slot's confirmed position). It is the Stream's
// dialFunc outside tests.
func (s *Stream) connect(ctx context.Context, resume pglogrepl.LSN) (conn, error) {
	cfg, err := pgconnect.ReplicationConfig(s.opt.URL)
	if err != nil {
		return nil, fatalError{fmt.Errorf("postgres.url: %w", err)}
	}
	// Read up to readBuffer bytes per system call: while the stream is
	// behind, the socket holds many messages at each wake-up. A message
	// larger than MaxMessageBytes is cut as it is read (cut.go).
	maxMsg := int64(s.opt.MaxMessageBytes)
	if maxMsg <= 0 {
		maxMsg = DefaultMaxMessageBytes
	}
	var own func([]byte) bool
	if s.opt.OwnPrefixes != nil {
		own = func(p []byte) bool { return slices.Contains(s.opt.OwnPrefixes, string(p)) }
	}
	var cut *cutReader
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		cut = newCutReader(r, maxMsg, own)
		return pgproto3.NewFrontend(cut, w)
	}
	// Read and write the socket with raw system calls (see rawnet).
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return rawnet.Wrap(c), nil
	}
	pg, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		err = fmt.Errorf("connecting for replication to %s: %w", pgconnect.Describe(cfg), err)
		if pgconnect.Refused(err) {
			return nil, fatalError{pgconnect.ExplainRefused(err)}
		}
		return nil, err
	}
	// After the startup exchange: its round trips give the RTT.
	rb := sizeReceiveBuffer(pg.Conn(), s.opt.ReceiveBuffer)
	opts := pglogrepl.StartReplicationOptions{PluginArgs: []string{
		"proto_version '1'",
		"publication_names " + quoteLiteral(pgx.Identifier{s.opt.Publication}.Sanitize()),
	}}
	if serverVersion(pg) >= messagesVersion {
		opts.PluginArgs = append(opts.PluginArgs, "messages 'true'")
	}
	if err := pglogrepl.StartReplication(ctx, pg, s.opt.Slot, resume, opts); err != nil {
		pg.Close(context.Background())
		return nil, startError(s.opt.Slot, err)
	}
	c := newPgConn(pg)
	c.rb, c.cut = rb, cut
	return c, nil
}

// startError classifies an error of START_REPLICATION: errSlotActive
// (another process holds the slot), fatal (the slot is missing, the role
// may not replicate), or worth a retry.
func startError(slot string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "55006": // object_in_use
			return fmt.Errorf("%w: %s", errSlotActive, pgErr.Message)
		case "42704": // undefined_object
			return fatalError{fmt.Errorf("%w: %s; run 'cdc init'", ErrSlotMissing, pgErr.Message)}
		case "42501", "28000", "28P01":
			return fatalError{fmt.Errorf("starting replication on slot %q: %w", slot, err)}
		case "55000": // object_not_in_prerequisite_state: an invalidated slot, wal_level, another database
			return fatalError{fmt.Errorf("%w: starting replication on slot %q: %w%s", ErrSlotRefused, slot, err, detail(pgErr))}
		}
	}
	return fmt.Errorf("starting replication on slot %q: %w", slot, err)
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// detail returns the server's DETAIL and HINT of e, which its Error()
// leaves out, as "; DETAIL: …; HINT: …".
func detail(e *pgconn.PgError) string {
	var s string
	if e.Detail != "" {
		s += "; DETAIL: " + e.Detail
	}
	if e.Hint != "" {
		s += "; HINT: " + e.Hint
	}
	return s
}

func hint(e *pgconn.PgError) string {
	switch {
	case e.Code == "58P01" || strings.Contains(e.Message, "has already been removed"):
		return " (the WAL the slot needs is gone: the slot was invalidated, e.g. by max_slot_wal_keep_size; messages in it are lost to replication — recreate the slot and re-send from the outbox table)"
	}
	return ""
}

func serverVersion(conn *pgconn.PgConn) int {
	var v int
	fmt.Sscan(conn.ParameterStatus("server_version_num"), &v)
	if v == 0 {
		// server_version_num is not reported before PG 16; parse "15.4 (Debian…)".
		var major int
		fmt.Sscan(conn.ParameterStatus("server_version"), &major)
		v = major * 10000
	}
	return v
}
