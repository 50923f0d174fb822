package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// session streams on one connection: the loop asks its sessionState what
// to do, does the I/O and feeds the result back. It lives for one call of
// Stream.session.
type session struct {
	s          *Stream
	ctx, abort context.Context
	out        chan<- []Event
	c          conn
	st         sessionState
}

// session streams on c, which it closes. It returns nil when ctx ended
// and the final status was sent; otherwise the error that ended the
// connection.
func (s *Stream) session(ctx, abort context.Context, out chan<- []Event, c conn, first bool) error {
	defer c.Close()
	s.connected.Store(true)
	defer s.connected.Store(false)
	ev := s.opt.Log.Info().Str("slot", s.opt.Slot).Str("lsn", s.resume.String()).Str("confirmed", s.cp.Confirmed().String())
	if c, ok := c.(interface{ receiveBuffer() receiveBuffer }); ok {
		rb := c.receiveBuffer()
		// receive_buffer 0: the kernel sizes it; rtt_us 0: not TCP or unknown.
		ev = ev.Int("receive_buffer", rb.set).Int64("rtt_us", rb.rtt.Microseconds())
	}
	ev.Msg("streaming")
	if !first {
		select {
		case out <- []Event{{Kind: Reset}}:
		case <-ctx.Done():
		}
	}
	stopWake := context.AfterFunc(ctx, func() { _ = c.SetReadDeadline(time.Now()) })
	defer stopWake()
	ss := &session{s: s, ctx: ctx, abort: abort, out: out, c: c,
		st: newSessionState(s.resume, s.opt.StatusInterval)}
	if err := ss.sendStatus(); err != nil {
		return err
	}
	return ss.loop()
}

// loop reads until ctx ends (it then finishes and returns nil) or the
// connection fails.
func (ss *session) loop() error {
	s, st, c := ss.s, &ss.st, ss.c
	for {
		now := time.Now()
		if st.statusDue(now, s.cp) {
			if err := ss.sendStatus(); err != nil {
				return err
			}
		}
		if st.batchFull() || st.sendsAtOnce(c.Buffered()) {
			if err := ss.flush(); err != nil {
				return ss.finish()
			}
		}
		if d, set := st.readDeadline(now, s.cp); set {
			_ = c.SetReadDeadline(d)
		}
		if ss.ctx.Err() != nil {
			return ss.finish()
		}
		msg, err := c.ReceiveMessage()
		if err != nil {
			if errors.Is(err, errReadDeadline) {
				if err := ss.deadlineReached(); err != nil {
					return ss.finish()
				}
				continue
			}
			if ss.ctx.Err() != nil || ss.flush() != nil {
				return ss.finish()
			}
			return fmt.Errorf("receiving: %w", err)
		}
		s.lastReceived.Store(now.UnixNano())
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			r, err := st.copyData(msg.Data)
			if err != nil {
				return fatalError{err}
			}
			if r != (received{}) {
				if err := ss.act(r); err != nil {
					return err
				}
			}
		case *pgproto3.ErrorResponse:
			pgErr := pgconn.ErrorResponseToPgError(msg)
			return fatalError{fmt.Errorf("replication stream: %w%s%s", pgErr, detail(pgErr), hint(pgErr))}
		case *pgproto3.CopyDone:
			return errors.New("server ended the replication stream")
		}
	}
}

// act does what a message the state took asks for.
func (ss *session) act(r received) error {
	if r.switchBehind && ss.st.setBehind(r.behind) {
		ss.s.behindStarts.Add(1)
	}
	if r.keepalive {
		ss.s.serverWAL.Store(uint64(r.serverWAL))
		if r.reply {
			return ss.sendStatus()
		}
	}
	return nil
}

// deadlineReached does what a read that reached its deadline calls for; it
// returns an error only when the batch could not go downstream (ctx ended).
func (ss *session) deadlineReached() error {
	switch ss.st.deadlineReached() {
	case deadlineFlush:
		return ss.flush()
	case deadlineCaughtUp:
		ss.st.setBehind(false)
	}
	return nil
}

// sendStatus sends a standby status update with the confirmed position.
func (ss *session) sendStatus() error {
	c := ss.s.cp.Confirmed()
	now := time.Now()
	if err := ss.c.SendStatus(c, now); err != nil {
		return fmt.Errorf("sending standby status: %w", err)
	}
	ss.st.statusSent(c, now)
	return nil
}

// flush sends the open batch downstream; the resume point moves only
// then, so that a new connection does not skip transactions that were
// read but dropped. It fails only when ctx ended first.
func (ss *session) flush() error {
	if len(ss.st.batch) == 0 {
		return nil
	}
	if err := ss.emit(ss.st.batch); err != nil {
		return err
	}
	ss.s.resume = ss.st.batchSent()
	return nil
}

// emit sends a batch downstream, giving up when ctx ends. While the
// pipeline is full (a sink is down and the window is exhausted) it keeps
// the connection alive with status updates: the server ends a replication
// connection that sent nothing for wal_sender_timeout.
func (ss *session) emit(ev []Event) error {
	select {
	case ss.out <- ev:
		return nil
	default:
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case ss.out <- ev:
			return nil
		case <-ss.ctx.Done():
			return ss.ctx.Err()
		case <-tick.C:
			if err := ss.sendStatus(); err != nil {
				ss.s.opt.Log.Warn().Err(err).Msg("status update while the pipeline is full failed")
			}
		}
	}
}

// finish closes the output, waits for the pipeline to drain (or abort)
// and sends the final standby status with everything acknowledged.
func (ss *session) finish() error {
	s := ss.s
	s.closeOut() // the pipeline drains what it has, then the sinks
	if s.opt.Drained != nil {
		select {
		case <-s.opt.Drained:
		case <-ss.abort.Done():
		}
	}
	if err := ss.sendStatus(); err != nil {
		s.opt.Log.Warn().Err(err).Msg("final standby status not sent; the slot keeps the last position sent before")
		return nil
	}
	s.opt.Log.Info().Str("slot", s.opt.Slot).Str("lsn", s.cp.Confirmed().String()).Msg("final position confirmed")
	return nil
}
