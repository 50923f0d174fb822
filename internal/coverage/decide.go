package coverage

import (
	"slices"
	"time"

	"github.com/jackc/pglogrepl"
)

// The watcher's decisions, apart from any connection or clock: what one
// look at the catalog, with the slot's and the pipeline's positions, does
// to the coverage row, and what the watcher is to do about it.

const (
	// Busy is how often the watcher looks while the outbox is not
	// published or a gap waits to be relayed.
	Busy = time.Second
	// Quiet is how often it looks while the outbox is published and no
	// gap is open, if no Relation message of the stream calls for a look
	// before (docs/design.md, "Invariant 17 at rest").
	Quiet = 10 * time.Second
	// saveEvery is how often the row is written when neither what covers
	// the outbox nor a gap changed: VerifiedAt and SafeAt saved late are
	// earlier than they could be, which only widens what a later fill or
	// cdc resync reads (docs/design.md, "Invariant 17 at rest").
	saveEvery = time.Minute
	// fillSlack is how far past the time the outbox was seen published
	// again a fill looks: a transaction that committed while the watcher
	// read the time and then the WAL position may carry a later time.
	fillSlack = time.Second
	// maxMarks bounds the marks kept for SafeAt.
	maxMarks = 1000
)

// mark is a point in time and the WAL insert position read after it: a
// transaction whose commit is after lsn committed after at.
type mark struct {
	at  time.Time
	lsn pglogrepl.LSN
}

// Observation is what the watcher saw on one look.
type Observation struct {
	Look Look
	// Confirmed is the slot's confirmed position as the server has it (a
	// crash loses what the relay confirmed but did not tell the server).
	Confirmed pglogrepl.LSN
	// Handled is how far the pipeline handled the stream
	// (pipeline.Handled).
	Handled pglogrepl.LSN
	// Now is the relay's clock.
	Now time.Time
}

// Actions is what the watcher is to do after a look.
type Actions struct {
	// Published is whether the outbox is published now (the metric
	// walpost_outbox_not_published is its negation).
	Published bool
	// Opened: a gap opened (counted in walpost_stream_gaps_total).
	Opened bool
	// NotPublished: log that the outbox is not published (Look.Why,
	// since Row.GapFrom).
	NotPublished bool
	// Changed: log that what covers the outbox changed from Was to
	// Look.Seen.
	Changed bool
	Was     string
	// Save: write the row.
	Save bool
	// GapOpen is whether a gap is open after the look.
	GapOpen bool
	// Fill, when set, is the stretch of rows to read from the table and
	// relay (then State.Filled).
	Fill *Window
	// Next is when to look again.
	Next time.Duration
}

// Window is a stretch of the outbox's time column, both ends included.
type Window struct{ From, To time.Time }

// State is the watcher's record between looks. Its zero value is not
// ready: use NewState.
type State struct {
	// Row is the coverage row; nil until the first look when none was
	// loaded.
	Row *Row
	// started is when the streaming cycle started: its check saw the
	// outbox covered then.
	started time.Time
	// margin is postgres.gap_margin: a fill reads rows from that much
	// before the gap.
	margin time.Duration
	marks  []mark
	// fillAt is a WAL position read at least fillSlack after the gap's
	// end: the fill waits until the pipeline handled the stream up to it,
	// so that the rows it reads that the stream carries are all among the
	// ids the pipeline remembers. 0 until read.
	fillAt pglogrepl.LSN
	saved  time.Time // when Row was last written
	// warned: "not published" was logged and not followed by a change.
	warned bool
}

// NewState starts the record of a streaming cycle that started at
// started, with the row loaded from the coverage table (nil for none).
func NewState(row *Row, started time.Time, margin time.Duration) *State {
	return &State{Row: row, started: started, margin: margin}
}

// Observe takes one look and says what to do.
func (s *State) Observe(o Observation) Actions {
	a := Actions{Published: o.Look.Covered}
	if s.Row == nil {
		verified := o.Look.At
		if !o.Look.Covered {
			verified = o.Look.At.Add(-o.Now.Sub(s.started)) // the check at the cycle's start saw it covered
		}
		s.Row = &Row{Seen: o.Look.Seen, VerifiedAt: verified}
		a.Save = true
	}
	s.safe(o.Look, o.Confirmed)
	row := s.Row
	if o.Look.Covered {
		if o.Look.Seen != row.Seen || row.Open() && row.GapTo.IsZero() {
			a.Opened = s.open()
			row.GapTo, row.GapToLSN, s.fillAt = o.Look.At, o.Look.LSN, 0
			a.Save, a.Changed, a.Was = true, true, row.Seen
			s.warned = false
			row.Seen = o.Look.Seen
		}
		row.VerifiedAt = o.Look.At
	} else if !row.Open() || !row.GapTo.IsZero() || !s.warned {
		a.Opened = s.open()
		row.GapTo, row.GapToLSN, s.fillAt = time.Time{}, 0, 0
		a.Save, a.NotPublished = true, true
		s.warned = true
	}
	if o.Now.Sub(s.saved) >= saveEvery {
		a.Save = true
	}
	a.GapOpen = row.Open()
	a.Next = Quiet
	if !o.Look.Covered || row.Open() {
		a.Next = Busy
	}
	if !row.Open() || row.GapTo.IsZero() {
		return a
	}
	if s.fillAt == 0 && !o.Look.At.Before(row.GapTo.Add(fillSlack)) {
		s.fillAt = o.Look.LSN
	}
	if s.fillAt != 0 && o.Handled >= s.fillAt {
		a.Fill = &Window{From: row.GapFrom.Add(-s.margin), To: row.GapTo.Add(fillSlack)}
	}
	return a
}

// safe records the look as a mark and moves Row.SafeAt to the last mark
// the slot's confirmed position passed.
func (s *State) safe(l Look, confirmed pglogrepl.LSN) {
	s.marks = append(s.marks, mark{l.At, l.LSN})
	for ; len(s.marks) > 0 && s.marks[0].lsn <= confirmed; s.marks = s.marks[1:] {
		s.Row.SafeAt = s.marks[0].at
	}
	if n := len(s.marks); n > maxMarks {
		s.marks = slices.Clone(s.marks[n-maxMarks:])
	}
}

// open opens a gap from the last time the coverage was verified, unless
// one is open; it reports whether it opened one.
func (s *State) open() bool {
	if s.Row.Open() {
		return false
	}
	s.Row.GapFrom = s.Row.VerifiedAt
	return true
}

// Saved records that the row was written at now.
func (s *State) Saved(now time.Time) { s.saved = now }

// Filled closes the gap whose rows were relayed: the row is to be written.
func (s *State) Filled() {
	s.Row.GapFrom, s.Row.GapTo, s.Row.GapToLSN, s.fillAt = time.Time{}, time.Time{}, 0, 0
}
