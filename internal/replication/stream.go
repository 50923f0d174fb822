package replication

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/pgconnect"
)

// EventKind is the kind of an Event.
type EventKind uint8

// Event kinds.
const (
	// Data is an XLogData: one pgoutput message in Event.Data, written at
	// Event.LSN.
	Data EventKind = iota + 1
	// Keepalive carries the server's WAL end (Event.LSN). Outside a
	// transaction every change before it has been sent.
	Keepalive
	// Reset says a new connection starts here: forget cached relations,
	// and abandon a transaction left open by the old connection (the
	// server sends it again).
	Reset
)

// Event is what the stream passes downstream, in stream order.
type Event struct {
	Kind EventKind
	LSN  pglogrepl.LSN
	Data []byte // owned by the receiver
}

// Confirmer is what the stream needs of the checkpoint: the position that
// may be confirmed to the server. Confirmed never decreases and is safe to
// call from any goroutine.
type Confirmer interface {
	Confirmed() pglogrepl.LSN
	Idle() bool
}

// StreamOptions configures a Stream.
type StreamOptions struct {
	// URL of the database; replication=database is added.
	URL         string
	Slot        string
	Publication string
	// StatusInterval is the longest time between standby status updates.
	StatusInterval time.Duration
	// MaxBackoff caps the wait between reconnect attempts.
	MaxBackoff time.Duration
	// Drained is closed by the relay when every sink has drained after the
	// stream stopped reading; the stream then sends its final status.
	Drained <-chan struct{}
	Log     zerolog.Logger
}

// Stream owns the replication connection: it alone reads from it and alone
// sends standby status updates. It reconnects with backoff when the
// connection is lost, resuming after the last transaction it received in
// full.
type Stream struct {
	opt          StreamOptions
	cp           Confirmer
	lastReceived atomic.Int64 // unix nanos of the last message from the server
	serverWAL    atomic.Uint64
	connected    atomic.Bool
	// held is the connection Acquire started replication on, for Run's
	// first session.
	held *pgconn.PgConn
	// resume is where a new connection starts: the end of the last commit
	// received in full (or a later point outside any transaction).
	resume   pglogrepl.LSN
	inTx     bool
	closeOut func()
	// coalesceStarts counts how often the stream began coalescing reads.
	coalesceStarts atomic.Int64
}

// NewStream returns a stream reporting cp's confirmed position.
func NewStream(opt StreamOptions, cp Confirmer) *Stream {
	if opt.StatusInterval <= 0 {
		opt.StatusInterval = 10 * time.Second
	}
	if opt.MaxBackoff <= 0 {
		opt.MaxBackoff = 30 * time.Second
	}
	s := &Stream{opt: opt, cp: cp}
	s.lastReceived.Store(time.Now().UnixNano())
	return s
}

// LastReceived is when the server last sent anything (data or keepalive).
func (s *Stream) LastReceived() time.Time { return time.Unix(0, s.lastReceived.Load()) }

// ServerWAL is the server's WAL end from the last keepalive.
func (s *Stream) ServerWAL() pglogrepl.LSN { return pglogrepl.LSN(s.serverWAL.Load()) }

// Connected reports whether the stream is streaming now.
func (s *Stream) Connected() bool { return s.connected.Load() }

// Sentinel errors of the stream.
var (
	// ErrSlotMissing is returned when the slot does not exist.
	ErrSlotMissing = errors.New("replication: slot does not exist")
	// ErrSlotLost is returned by Run when, reconnecting, it finds the slot
	// held by another process: another instance took over while this one
	// was disconnected. The relay must stop using its sinks and wait for
	// the slot again (Acquire) before it writes anything.
	ErrSlotLost = errors.New("replication: the slot was taken by another process while the stream reconnected")
)

// Backoff bounds. A reconnect waits Backoff.Start (jittered) after a
// connection that streamed, doubling up to StreamOptions.MaxBackoff while
// attempts keep failing; a slot held by another process is tried again
// every SlotPoll (jittered), however long it stays held.
const (
	BackoffStart = 250 * time.Millisecond
	SlotPoll     = time.Second
)

// Backoff is an exponential backoff with jitter that Reset returns to its
// start: after a connection that worked, the next fault waits little
// again. The zero value is not usable; use NewBackoff. Not safe for
// concurrent use.
type Backoff struct {
	start, max, next time.Duration
}

// NewBackoff returns a backoff from start to max.
func NewBackoff(start, max time.Duration) *Backoff {
	return &Backoff{start: start, max: max, next: start}
}

// Next returns the wait before the next attempt (half to all of the
// current step) and doubles the step up to max.
func (b *Backoff) Next() time.Duration {
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(b.next*2, b.max)
	return d
}

// Reset returns the step to its start.
func (b *Backoff) Reset() { b.next = b.start }

// Sleep waits d or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func jitter(d time.Duration) time.Duration { return d*3/4 + rand.N(d/2+1) }

// Acquire connects and starts replication on the slot, waiting while
// another process holds it (a hot standby) and retrying while the server
// cannot be reached, with backoff. It returns nil once the stream holds
// the slot: Run then streams on that connection. It returns ctx's error
// when ctx ends first, and a fatal error (the slot is missing, the role
// may not replicate) at once.
func (s *Stream) Acquire(ctx context.Context) error {
	backoff := NewBackoff(BackoffStart, s.opt.MaxBackoff)
	waiting := false
	for {
		conn, err := s.connect(ctx)
		if err == nil {
			s.held = conn
			if waiting {
				s.opt.Log.Info().Str("slot", s.opt.Slot).Msg("the slot is free: taking over")
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if isFatal(err) {
			return err
		}
		var wait time.Duration
		if errors.Is(err, errSlotActive) {
			wait = jitter(SlotPoll)
			if !waiting {
				s.opt.Log.Warn().Err(err).Str("slot", s.opt.Slot).
					Msg("slot is held by another process (another walpost instance?); waiting for it as a standby: no sink is opened until it is free")
			}
			waiting = true
			backoff.Reset()
		} else {
			wait = backoff.Next()
			s.opt.Log.Warn().Err(err).Str("slot", s.opt.Slot).Dur("retry_in", wait).Msg("cannot start replication; retrying")
		}
		if !Sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

// Release closes the connection Acquire left for Run, when Run will not
// be called.
func (s *Stream) Release() {
	if s.held != nil {
		s.held.Close(context.Background())
		s.held = nil
	}
}

// Run streams into out until ctx ends, then closes out, waits for
// opt.Drained (or abort), sends a final status with the confirmed position
// and returns. abort ends the wait early (the relay failed). Run returns
// nil after a stop through ctx, ErrSlotLost when another process took the
// slot while it reconnected, or the error that made it give up. Without
// Acquire first, its first session connects like a reconnect.
func (s *Stream) Run(ctx, abort context.Context, out chan<- []Event) error {
	var once sync.Once
	s.closeOut = func() { once.Do(func() { close(out) }) }
	defer s.closeOut()
	backoff := NewBackoff(BackoffStart, s.opt.MaxBackoff)
	first := true
	for {
		conn := s.held
		s.held = nil
		var err error
		if conn == nil {
			conn, err = s.connect(ctx)
		}
		if err == nil {
			// A connection that streamed resets the backoff: the next
			// fault waits little again.
			backoff.Reset()
			err = s.session(ctx, abort, out, conn, first)
			first = false
			if err == nil {
				return nil // ctx ended; the final status is sent
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if isFatal(err) {
			return err
		}
		wait := backoff.Next()
		switch {
		case errors.Is(err, errSlotActive) && !first:
			return fmt.Errorf("%w: %v", ErrSlotLost, err)
		case errors.Is(err, errSlotActive):
			wait = jitter(SlotPoll)
			s.opt.Log.Warn().Err(err).Str("slot", s.opt.Slot).Msg("slot is held by another process (another walpost instance?); waiting for it")
		default:
			s.opt.Log.Warn().Err(err).Str("slot", s.opt.Slot).Dur("retry_in", wait).Msg("replication connection lost; reconnecting")
		}
		if !Sleep(ctx, wait) {
			return nil
		}
	}
}

var errSlotActive = errors.New("replication: slot is active in another process")

type fatalError struct{ error }

func (e fatalError) Unwrap() error { return e.error }

func isFatal(err error) bool {
	var f fatalError
	return errors.As(err, &f)
}

// connect opens a replication connection and starts replication on the
// slot at s.resume (0: the slot's confirmed position).
func (s *Stream) connect(ctx context.Context) (*pgconn.PgConn, error) {
	cfg, err := pgconnect.ReplicationConfig(s.opt.URL)
	if err != nil {
		return nil, fatalError{fmt.Errorf("postgres.url: %w", err)}
	}
	// Read up to readBuffer bytes per system call: while the stream is
	// behind, the socket holds many messages at each wake-up.
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		return pgproto3.NewFrontend(bufio.NewReaderSize(r, readBuffer), w)
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting for replication to %s: %w", pgconnect.Describe(cfg), err)
	}
	opts := pglogrepl.StartReplicationOptions{PluginArgs: []string{
		"proto_version '1'",
		"publication_names " + quoteLiteral(pgx.Identifier{s.opt.Publication}.Sanitize()),
	}}
	if serverVersion(conn) >= 140000 {
		opts.PluginArgs = append(opts.PluginArgs, "messages 'true'")
	}
	if err := pglogrepl.StartReplication(ctx, conn, s.opt.Slot, s.resume, opts); err != nil {
		conn.Close(context.Background())
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			switch pgErr.Code {
			case "55006": // object_in_use
				return nil, fmt.Errorf("%w: %s", errSlotActive, pgErr.Message)
			case "42704": // undefined_object
				return nil, fatalError{fmt.Errorf("%w: %s; run 'cdc init'", ErrSlotMissing, pgErr.Message)}
			case "42501", "28000", "28P01":
				return nil, fatalError{fmt.Errorf("starting replication on slot %q: %w", s.opt.Slot, err)}
			}
		}
		return nil, fmt.Errorf("starting replication on slot %q: %w", s.opt.Slot, err)
	}
	return conn, nil
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// session streams on conn, which it closes. It returns nil when ctx ended
// and the final status was sent.
func (s *Stream) session(ctx, abort context.Context, out chan<- []Event, conn *pgconn.PgConn, first bool) error {
	defer conn.Close(context.Background())
	s.connected.Store(true)
	defer s.connected.Store(false)
	s.opt.Log.Info().Str("slot", s.opt.Slot).Str("lsn", s.resume.String()).Str("confirmed", s.cp.Confirmed().String()).Msg("streaming")
	if !first {
		select {
		case out <- []Event{{Kind: Reset}}:
		case <-ctx.Done():
		}
	}
	s.inTx = false

	netConn := conn.Conn()
	co := newCoalescer(netConn)
	var commitTime int64 // of the transaction being read, µs since 2000
	stopWake := context.AfterFunc(ctx, func() { _ = netConn.SetReadDeadline(time.Now()) })
	defer stopWake()

	var lastSent pglogrepl.LSN
	var lastStatus time.Time
	var deadline time.Time
	send := func(reply bool) error {
		c := s.cp.Confirmed()
		err := pglogrepl.SendStandbyStatusUpdate(context.Background(), conn, pglogrepl.StandbyStatusUpdate{
			WALWritePosition: c, WALFlushPosition: c, WALApplyPosition: c,
			ClientTime: time.Now(), ReplyRequested: reply,
		})
		if err != nil {
			return fmt.Errorf("sending standby status: %w", err)
		}
		lastSent, lastStatus = c, time.Now()
		return nil
	}
	if err := send(false); err != nil {
		return err
	}
	const pollPending = 10 * time.Millisecond

	// Events go downstream in batches: one channel send per read from the
	// socket instead of one per message. While a batch is open the read
	// deadline is in the past, so a read only returns messages already
	// buffered; when it times out the batch is sent.
	var batch []Event
	var batchBytes int
	var slab []byte
	polling := false
	// resume moves only when the events before it went downstream: a new
	// connection must not skip transactions that were read but dropped.
	resume := s.resume
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := s.emit(ctx, out, batch, send); err != nil {
			return err
		}
		s.resume = resume
		batch, slab, batchBytes = nil, nil, 0 // owned downstream now
		return nil
	}
	for {
		now := time.Now()
		if c := s.cp.Confirmed(); c != lastSent && now.Sub(lastStatus) >= pollPending || now.Sub(lastStatus) >= s.opt.StatusInterval {
			if err := send(false); err != nil {
				return err
			}
		}
		if len(batch) >= maxBatch || batchBytes >= maxBatchBytes {
			if err := flush(); err != nil {
				return s.finish(abort, send)
			}
		}
		if len(batch) > 0 {
			if !polling {
				polling = true
				_ = netConn.SetReadDeadline(pastDeadline)
			}
		} else {
			next := lastStatus.Add(s.opt.StatusInterval)
			if s.cp.Confirmed() != lastSent || !s.cp.Idle() {
				next = minTime(next, now.Add(pollPending))
			}
			if co.on {
				next = minTime(next, now.Add(coalesceWait))
			}
			if polling || deadline.IsZero() || !deadline.After(now) || next.Before(deadline) {
				polling = false
				deadline = next
				_ = netConn.SetReadDeadline(deadline)
			}
		}
		if ctx.Err() != nil {
			return s.finish(abort, send)
		}
		msg, err := conn.ReceiveMessage(context.Background())
		if err != nil {
			if pgconn.Timeout(err) {
				if polling {
					if err := flush(); err != nil {
						return s.finish(abort, send)
					}
				} else {
					// Fewer than coalesceBytes came within coalesceWait:
					// read what is there, and eagerly until a
					// transaction says the stream is behind again.
					co.set(false)
				}
				continue
			}
			if ctx.Err() != nil {
				return s.finish(abort, send)
			}
			if flush() != nil {
				return s.finish(abort, send)
			}
			return fmt.Errorf("receiving: %w", err)
		}
		s.lastReceived.Store(now.UnixNano())
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			if len(msg.Data) == 0 {
				continue
			}
			switch msg.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
				if err != nil {
					return fatalError{fmt.Errorf("parsing keepalive: %w", err)}
				}
				s.serverWAL.Store(uint64(ka.ServerWALEnd))
				if !s.inTx && ka.ServerWALEnd > resume {
					resume = ka.ServerWALEnd
				}
				batch = append(batch, Event{Kind: Keepalive, LSN: ka.ServerWALEnd})
				if ka.ReplyRequested {
					if err := send(false); err != nil {
						return err
					}
				}
			case pglogrepl.XLogDataByteID:
				// XLogData: WAL start, WAL end, send time (µs since 2000
				// on the server's clock), then the pgoutput message.
				if len(msg.Data) < 25 {
					return fatalError{fmt.Errorf("parsing XLogData: %d bytes, want at least 25", len(msg.Data))}
				}
				walStart := pglogrepl.LSN(binary.BigEndian.Uint64(msg.Data[1:9]))
				walData := msg.Data[25:]
				if len(walData) > 0 {
					switch walData[0] {
					case 'B':
						s.inTx = true
						if len(walData) >= 17 {
							commitTime = int64(binary.BigEndian.Uint64(walData[9:17]))
						}
					case 'C':
						s.inTx = false
						resume = walStart // the commit's end LSN
					}
				}
				if s.inTx && co.observe(int64(binary.BigEndian.Uint64(msg.Data[17:25]))-commitTime) {
					s.coalesceStarts.Add(1)
				}
				var data []byte
				if n := len(walData); n > slabSize/4 {
					data = append([]byte(nil), walData...)
				} else {
					if cap(slab)-len(slab) < n {
						slab = make([]byte, 0, slabSize)
					}
					slab = append(slab, walData...)
					data = slab[len(slab)-n : len(slab) : len(slab)]
				}
				batch = append(batch, Event{Kind: Data, LSN: walStart, Data: data})
				batchBytes += len(data)
			}
		case *pgproto3.ErrorResponse:
			pgErr := pgconn.ErrorResponseToPgError(msg)
			return fatalError{fmt.Errorf("replication stream: %w%s", pgErr, hint(pgErr))}
		case *pgproto3.CopyDone:
			return errors.New("server ended the replication stream")
		}
	}
}

const (
	// A downstream send carries at most maxBatch events, and stops taking
	// more once it holds maxBatchBytes of message data: what the stream
	// has read but the pipeline not yet admitted to the window is bounded
	// by the output channel's capacity times that (plus one message
	// larger than it).
	maxBatch      = 1024
	maxBatchBytes = 256 << 10
	slabSize      = 8 << 10  // bytes of message data per allocation
	readBuffer    = 64 << 10 // bytes per read from the socket

	// While the server sends transactions behindMicros or more after
	// their commit, the stream is catching up and coalesces reads (see
	// coalescer): the socket wakes it once coalesceBytes are queued, or
	// after coalesceWait. Below caughtUpMicros it reads eagerly again, each
	// message as it comes.
	behindMicros   = 100_000
	caughtUpMicros = 20_000
	coalesceBytes  = 32 << 10
	coalesceWait   = 2 * time.Millisecond
)

// pastDeadline makes reads return at once unless data is buffered.
var pastDeadline = time.Unix(1, 0)

// emit sends a batch downstream, giving up when ctx ends. While the
// pipeline is full (a sink is down and the window is exhausted) it keeps
// the connection alive with status updates: the server ends a replication
// connection that sent nothing for wal_sender_timeout.
func (s *Stream) emit(ctx context.Context, out chan<- []Event, ev []Event, keepalive func(bool) error) error {
	select {
	case out <- ev:
		return nil
	default:
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case out <- ev:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if err := keepalive(false); err != nil {
				s.opt.Log.Warn().Err(err).Msg("status update while the pipeline is full failed")
			}
		}
	}
}

// finish waits for the pipeline to drain (or abort) and sends the final
// standby status with everything acknowledged.
func (s *Stream) finish(abort context.Context, send func(bool) error) error {
	s.closeOut() // the pipeline drains what it has, then the sinks
	if s.opt.Drained != nil {
		select {
		case <-s.opt.Drained:
		case <-abort.Done():
		}
	}
	if err := send(false); err != nil {
		s.opt.Log.Warn().Err(err).Msg("final standby status not sent; the slot keeps the last position sent before")
		return nil
	}
	s.opt.Log.Info().Str("slot", s.opt.Slot).Str("lsn", s.cp.Confirmed().String()).Msg("final position confirmed")
	return nil
}

func hint(e *pgconn.PgError) string {
	switch {
	case e.Code == "58P01" || strings.Contains(e.Message, "has already been removed"):
		return " (the WAL the slot needs is gone: the slot was invalidated, e.g. by max_slot_wal_keep_size; messages in it are lost to replication — recreate the slot and re-send from the outbox table)"
	case e.Code == "42704":
		return " (does the publication exist? run 'cdc init')"
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

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
