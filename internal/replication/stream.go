package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/backoff"
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
	// SlotPoll is how often a slot held by another process is tried
	// again, jittered by ±25% (default SlotPoll).
	SlotPoll time.Duration
	// ReceiveBuffer sizes the replication socket's receive buffer: n > 0
	// n bytes; 0 the kernel's autotuning (see sizeReceiveBuffer).
	ReceiveBuffer int
	// MaxMessageBytes is the largest pgoutput message the stream reads
	// into memory: a larger one is replaced by its stand-in as it is read
	// (cut.go; decoder.OversizedByte). 0: DefaultMaxMessageBytes.
	MaxMessageBytes int
	// OwnPrefixes are the prefixes of the logical messages the relay
	// reads (decoder.HeartbeatPrefix, the adopt prefix, a table-less
	// outbox's prefix): a logical message of any other prefix larger than
	// 64 KiB is read past like an oversized one (cut.go). nil: every
	// prefix counts as the relay's.
	OwnPrefixes []string
	// Drained is closed by the relay when every sink has drained after the
	// stream stopped reading; the stream then sends its final status.
	Drained <-chan struct{}
	Log     zerolog.Logger
	// Gate, when set, is entered before each attempt to take the slot
	// and left when the stream does not hold it (gate.go); nil: none.
	Gate Gate
}

// DefaultMaxMessageBytes is StreamOptions.MaxMessageBytes's default
// (postgres.max_message_bytes).
const DefaultMaxMessageBytes = 64 << 20

// Stream owns the replication connection: it alone reads from it and alone
// sends standby status updates. It reconnects with backoff when the
// connection is lost, resuming after the last transaction it received in
// full. Acquire, Release and Run are called from one goroutine;
// LastReceived, ServerWAL and Connected are safe for concurrent use.
type Stream struct {
	opt          StreamOptions
	cp           Confirmer
	lastReceived atomic.Int64 // unix nanos of the last message from the server
	serverWAL    atomic.Uint64
	connected    atomic.Bool
	// held is the connection Acquire started replication on, for Run's
	// first session.
	held conn
	// resume is where a new connection starts: the end of the last commit
	// received in full (or a later point outside any transaction) whose
	// events went downstream.
	resume   pglogrepl.LSN
	closeOut func()
	// dial connects and starts replication (Stream.connect; tests replace
	// it with a scripted server), sleep waits between attempts (backoff.Sleep).
	dial  dialFunc
	sleep func(context.Context, time.Duration) bool
	// behindStarts counts how often the stream found itself behind the
	// server (reading a backlog).
	behindStarts atomic.Int64
	// entered: the stream holds what opt.Gate's last Enter gave (gate.go).
	entered bool
}

// NewStream returns a stream reporting cp's confirmed position.
func NewStream(opt StreamOptions, cp Confirmer) *Stream {
	if opt.StatusInterval <= 0 {
		opt.StatusInterval = 10 * time.Second
	}
	if opt.MaxBackoff <= 0 {
		opt.MaxBackoff = 30 * time.Second
	}
	if opt.SlotPoll <= 0 {
		opt.SlotPoll = SlotPoll
	}
	logSwitches(opt.Log)
	s := &Stream{opt: opt, cp: cp, sleep: backoff.Sleep}
	s.dial = s.connect
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
	// ErrSlotInvalidated is returned when the server invalidated the slot
	// (wal_status lost, or an invalidation_reason): it exists but can
	// never stream again.
	ErrSlotInvalidated = errors.New("replication: the server invalidated the slot")
	// ErrSlotRefused is returned when START_REPLICATION fails for a
	// reason that waiting does not fix (SQLSTATE 55000, e.g. an
	// invalidated slot); the error carries the server's DETAIL.
	ErrSlotRefused = errors.New("replication: the server refused to stream from the slot")
)

// Acquire connects and starts replication on the slot, waiting while
// another process holds it (a hot standby) and retrying while the server
// cannot be reached, with backoff. It returns nil once the stream holds
// the slot: Run then streams on that connection. It returns ctx's error
// when ctx ends first, and a fatal error (the slot is missing, the role
// may not replicate) at once.
func (s *Stream) Acquire(ctx context.Context) error {
	retry := backoff.New(BackoffStart, s.opt.MaxBackoff)
	waiting := false
	for {
		if err := s.enter(ctx); err != nil {
			return err
		}
		conn, err := s.dial(ctx, s.resume)
		if err == nil {
			s.held = conn
			if waiting {
				s.opt.Log.Info().Str("slot", s.opt.Slot).Msg("the slot is free: taking over")
			}
			return nil
		}
		s.leave()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if isFatal(err) {
			return err
		}
		var wait time.Duration
		if errors.Is(err, errSlotActive) {
			wait = jitter(s.opt.SlotPoll)
			if !waiting {
				s.opt.Log.Warn().Err(err).Str("slot", s.opt.Slot).
					Msg("slot is held by another process (another walpost instance?); waiting for it as a standby: no sink is opened until it is free")
			}
			waiting = true
			retry.Reset()
			if w, ok := s.opt.Gate.(SlotWaiter); ok {
				w.WaitFree(ctx, s.opt.SlotPoll)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				continue
			}
			s.opt.Log.Debug().Str("slot", s.opt.Slot).Dur("retry_in_ms", wait).Msg("slot still held; polling it again")
		} else {
			wait = retry.Next()
			s.opt.Log.Warn().Err(err).Str("slot", s.opt.Slot).Dur("retry_in_ms", wait).Msg("cannot start replication; retrying")
		}
		if !s.sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

// Release closes the connection Acquire left for Run, when Run will not
// be called, and leaves the Gate.
func (s *Stream) Release() {
	if s.held != nil {
		s.held.Close()
		s.held = nil
	}
	s.leave()
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
	defer s.leave() // after the connection closed (session)
	retry := backoff.New(BackoffStart, s.opt.MaxBackoff)
	first := true
	for {
		conn := s.held
		s.held = nil
		var err error
		if conn == nil {
			conn, err = s.dial(ctx, s.resume)
		}
		if err == nil {
			// A connection that streamed resets the backoff: the next
			// fault waits little again.
			retry.Reset()
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
		wait := retry.Next()
		switch {
		case errors.Is(err, errSlotActive) && !first:
			return fmt.Errorf("%w: %v", ErrSlotLost, err)
		case errors.Is(err, errSlotActive):
			wait = jitter(s.opt.SlotPoll)
			s.opt.Log.Warn().Err(err).Str("slot", s.opt.Slot).Msg("slot is held by another process (another walpost instance?); waiting for it")
		default:
			s.opt.Log.Warn().Err(err).Str("slot", s.opt.Slot).Dur("retry_in_ms", wait).Msg("replication connection lost; reconnecting")
		}
		if !s.sleep(ctx, wait) {
			return nil
		}
	}
}
