package replication

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
)

const (
	// A downstream send carries at most maxBatch events, and stops taking
	// more once it holds maxBatchBytes of message data: what the stream
	// has read but the pipeline not yet admitted to the window is bounded
	// by the output channel's capacity times that (plus one message
	// larger than it). 64 KiB, one read's worth, keeps that read-ahead
	// at 4 MiB for the relay's 64 slots: at 256 KiB its 16 MiB, doubled
	// by the collector's headroom, were most of the relay's peak RSS
	// whenever a sink was slower than the stream (bench/NOTES.md, "Peak
	// RSS of the Kafka relay").
	maxBatch      = 1024
	maxBatchBytes = 64 << 10
	slabSize      = 8 << 10  // bytes of message data per allocation
	readBuffer    = 64 << 10 // bytes per read from the socket

	// pollPending is the shortest time between status updates that
	// report a moved confirmed position, and how often the stream looks
	// at the position while something is in flight. Each update costs a
	// write, wakes the WAL sender, and makes it send a keepalive after
	// the next transaction it sends (one more read): at 10 ms that was a
	// noticeable share of the relay's wake-ups at 1,000 transactions/s
	// (BENCHMARKS.md, "What each optimisation bought").
	pollPending = 100 * time.Millisecond
	// pollBehind replaces pollPending while the stream is behind
	// and after that until a status update reported
	// everything acknowledged: when a backlog is read, the slot is
	// confirmed within 10 ms of the last acknowledgement, not 100 ms (a
	// large share of a catch-up's time: BENCHMARKS.md, "What each
	// optimisation bought"), at the cost of a hundred updates per second
	// while a backlog lasts.
	pollBehind = 10 * time.Millisecond

	// While the server sends transactions behindMicros or more after
	// their commit, the stream is behind (reading a backlog): status
	// updates go every pollBehind, and a read that finds nothing for
	// behindWait ends it. Below caughtUpMicros it has caught up. (Until
	// issue 34 the stream also coalesced its reads while behind, with
	// SO_RCVLOWAT; no clear gain in the bench, so reads are always eager.)
	behindMicros   = 100_000
	caughtUpMicros = 20_000
	behindWait     = 2 * time.Millisecond
)

// pastDeadline makes reads return at once unless data is buffered.
var pastDeadline = time.Unix(1, 0)

// sessionState is the pure state machine of one streaming session: it
// decides and the session does the I/O. It batches events, tracks where a
// new connection resumes, times standby status updates, chooses the read
// deadline and decides when the stream is behind. It reads no clock (the
// caller passes now) and touches no connection. Not safe for concurrent
// use.
type sessionState struct {
	statusInterval time.Duration

	// resume is where a new connection starts: the end of the last commit
	// received in full, or a keepalive's WAL end outside a transaction,
	// once every event before it went downstream. pending is that point
	// for the events read so far; it becomes resume when they are sent.
	resume, pending pglogrepl.LSN
	inTx            bool
	commitTime      int64 // of the transaction being read, µs since 2000

	// The open batch; slab holds its message bytes.
	batch      []Event
	batchBytes int
	slab       []byte
	// lastBatch is the length of the batch sent last: the next one starts
	// with room for as many events (at least minBatchCap), so that it is
	// one allocation, not one per doubling (add).
	lastBatch int

	// The last standby status update: its position and when it went.
	lastSent   pglogrepl.LSN
	lastStatus time.Time

	// polling: the read deadline is pastDeadline (a batch is open);
	// otherwise it is deadline.
	polling  bool
	deadline time.Time

	behind bool // the stream is reading a backlog
	// draining: behind ended, and no status update since reported
	// everything acknowledged (statuses go every pollBehind until one does).
	draining bool
}

// newSessionState returns the state of a session that starts streaming
// at resume.
func newSessionState(resume pglogrepl.LSN, statusInterval time.Duration) sessionState {
	return sessionState{statusInterval: statusInterval, resume: resume, pending: resume}
}

// statusSent records a standby status update reporting lsn, sent at now.
func (m *sessionState) statusSent(lsn pglogrepl.LSN, now time.Time) {
	m.lastSent, m.lastStatus = lsn, now
	if !m.behind && !m.inTx && lsn >= m.pending {
		m.draining = false // everything read is confirmed
	}
}

// poll is the shortest time between status updates that report a moved
// confirmed position: pollBehind while a backlog is read or its last
// acknowledgements are awaited, pollPending otherwise.
func (m *sessionState) poll() time.Duration {
	if m.behind || m.draining {
		return pollBehind
	}
	return pollPending
}

// statusDue reports whether a standby status update is due at now: the
// confirmed position moved and poll() passed since the last update, or
// statusInterval passed. It asks cp only when the time allows an update.
func (m *sessionState) statusDue(now time.Time, cp Confirmer) bool {
	since := now.Sub(m.lastStatus)
	return since >= m.statusInterval || since >= m.poll() && cp.Confirmed() != m.lastSent
}

// batchFull reports whether the open batch must go downstream before
// anything more is read.
func (m *sessionState) batchFull() bool {
	return len(m.batch) >= maxBatch || m.batchBytes >= maxBatchBytes
}

// batchSent records that the open batch went downstream (it is owned
// there now) and returns the new resume point. The slab's free tail
// serves the next batch: what went downstream ends before it (keep caps
// each message's capacity), and at low rates a batch holds a few hundred
// bytes, not a slab's worth.
func (m *sessionState) batchSent() pglogrepl.LSN {
	m.lastBatch = len(m.batch)
	m.batch, m.batchBytes = nil, 0
	m.resume = m.pending
	return m.resume
}

// sendsAtOnce reports whether the open batch goes downstream now, without
// the read that looks for more first: it ends outside a transaction,
// nothing more is buffered (buffered: conn.Buffered) and the stream is not
// behind. At low rates that read finds the socket empty at nearly every
// wake-up (docs/design.md, "Wake-ups at low rates"); reading a backlog,
// it is what makes batches as large as what arrived.
func (m *sessionState) sendsAtOnce(buffered bool) bool {
	return len(m.batch) > 0 && !m.inTx && !m.behind && !buffered
}

// waitsForCommit reports whether the open batch waits for the rest of its
// transaction: it ends inside one while the stream is not behind. The WAL
// sender sends a transaction only once it committed, at once, so the rest
// is on its way; a transaction whose Begin and Commit arrive apart then
// goes downstream once, not in two parts. The read keeps its deadline,
// the next status update (pollPending while anything is in flight), and
// the part goes then: a deadline of its own, moved per transaction, cost
// more than it saved (each earlier timer wakes the runtime's poller; the
// bench's relay CPU at 1,000 tx/s rose).
func (m *sessionState) waitsForCommit() bool {
	return m.inTx && !m.behind
}

// readDeadline returns the read deadline for the next read at now, and
// whether it differs from the one set. While a batch is open (and not
// waiting for its commit: waitsForCommit), reads only take what is
// buffered (pastDeadline), and a read that times out sends the batch.
// Otherwise a read waits until the next status update is due: at
// the latest statusInterval after the last one, pollPending after the last
// one while cp has something in flight or a position not yet reported (or
// pollPending from now once that passed; the same deadline for every read
// until the next update, so the runtime's timer is not reset per message),
// within behindWait while behind.
func (m *sessionState) readDeadline(now time.Time, cp Confirmer) (time.Time, bool) {
	if len(m.batch) > 0 && !m.waitsForCommit() {
		if m.polling {
			return time.Time{}, false
		}
		m.polling = true
		return pastDeadline, true
	}
	next := m.lastStatus.Add(m.statusInterval)
	if cp.Confirmed() != m.lastSent || !cp.Idle() {
		poll := m.lastStatus.Add(m.poll())
		if !poll.After(now) {
			poll = now.Add(m.poll())
		}
		next = minTime(next, poll)
	}
	if m.behind {
		next = minTime(next, now.Add(behindWait))
	}
	if m.polling || m.deadline.IsZero() || !m.deadline.After(now) || next.Before(m.deadline) {
		m.polling = false
		m.deadline = next
		return next, true
	}
	return time.Time{}, false
}

// deadlineAction is what a read that reached its deadline calls for.
type deadlineAction uint8

const (
	deadlineNothing deadlineAction = iota
	// deadlineFlush: everything buffered was read; send the batch.
	deadlineFlush
	// deadlineCaughtUp: nothing came within behindWait while behind: the
	// backlog is read, until a transaction says the stream is behind
	// again.
	deadlineCaughtUp
)

// deadlineReached returns what a read that reached its deadline calls for.
func (m *sessionState) deadlineReached() deadlineAction {
	switch {
	case m.polling, len(m.batch) > 0: // the batch waited for its commit (waitsForCommit)
		return deadlineFlush
	case m.behind:
		return deadlineCaughtUp
	}
	return deadlineNothing
}

// setBehind records whether the stream is behind now. It reports
// whether being behind began.
func (m *sessionState) setBehind(on bool) bool {
	began := on && !m.behind
	if m.behind && !on {
		m.draining = true
	}
	m.behind = on
	return began
}

// received is what the session must do about one message of the stream,
// beyond what copyData recorded.
type received struct {
	// keepalive: the message was a keepalive carrying serverWAL, the
	// server's WAL end.
	keepalive bool
	serverWAL pglogrepl.LSN
	// reply: the server asks for a standby status update now.
	reply bool
	// switchBehind: the stream is behind, or caught up, as behind says
	// (then call setBehind).
	switchBehind bool
	behind       bool
}

// copyData takes the payload of one CopyData message of the stream: an
// XLogData or a keepalive, appended to the open batch as an Event. Other
// payloads are ignored. It returns a protocol error for one too short to
// parse.
func (m *sessionState) copyData(data []byte) (received, error) {
	if len(data) == 0 || data[0] != pglogrepl.XLogDataByteID {
		return m.otherCopyData(data)
	}
	// XLogData: WAL start, WAL end, send time (µs since 2000 on the
	// server's clock), then the pgoutput message.
	if len(data) < 25 {
		return received{}, fmt.Errorf("parsing XLogData: %d bytes, want at least 25", len(data))
	}
	walStart := pglogrepl.LSN(binary.BigEndian.Uint64(data[1:9]))
	walData := data[25:]
	if len(walData) > 0 {
		switch walData[0] {
		case 'B':
			m.inTx = true
			if len(walData) >= 17 {
				m.commitTime = int64(binary.BigEndian.Uint64(walData[9:17]))
			}
		case 'C':
			m.inTx = false
			m.pending = walStart // the commit's end LSN
		}
	}
	var r received
	if m.inTx {
		r.behind, r.switchBehind = m.observeLag(int64(binary.BigEndian.Uint64(data[17:25])) - m.commitTime)
	}
	m.add(Event{Kind: Data, LSN: walStart, Data: m.keep(walData)})
	m.batchBytes += len(walData)
	return r, nil
}

// otherCopyData takes a CopyData payload that is not an XLogData.
func (m *sessionState) otherCopyData(data []byte) (received, error) {
	if len(data) == 0 || data[0] != pglogrepl.PrimaryKeepaliveMessageByteID {
		return received{}, nil
	}
	ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
	if err != nil {
		return received{}, fmt.Errorf("parsing keepalive: %w", err)
	}
	if !m.inTx && ka.ServerWALEnd > m.pending {
		m.pending = ka.ServerWALEnd
	}
	m.add(Event{Kind: Keepalive, LSN: ka.ServerWALEnd})
	return received{keepalive: true, serverWAL: ka.ServerWALEnd, reply: ka.ReplyRequested}, nil
}

// observeLag takes the lag of a message inside a transaction, in µs: how
// long after the transaction committed the server sent it. It returns
// whether the lag says the stream is behind, and whether that is a switch.
func (m *sessionState) observeLag(lag int64) (want, change bool) {
	switch {
	case lag >= behindMicros:
		want = true
	case lag < caughtUpMicros:
		want = false
	default:
		return m.behind, false
	}
	return want, want != m.behind
}

// minBatchCap is the room a new batch starts with at the least: a
// transaction's Begin, row and Commit, and a keepalive.
const minBatchCap = 4

// add appends ev to the open batch. A new batch gets room for as many
// events as the last one had: at low rates a batch holds a few events and
// took up to three allocations as append doubled it (1, 2, 4), in a
// catch-up some hundreds and about eight.
func (m *sessionState) add(ev Event) {
	if m.batch == nil {
		m.batch = make([]Event, 0, min(max(m.lastBatch, minBatchCap), maxBatch))
	}
	m.batch = append(m.batch, ev)
}

// keep copies a message's bytes for the batch: small ones into the
// current slab, large ones alone.
func (m *sessionState) keep(b []byte) []byte {
	n := len(b)
	if n > slabSize/4 {
		return append([]byte(nil), b...)
	}
	if cap(m.slab)-len(m.slab) < n {
		m.slab = make([]byte, 0, slabSize)
	}
	m.slab = append(m.slab, b...)
	return m.slab[len(m.slab)-n : len(m.slab) : len(m.slab)]
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
