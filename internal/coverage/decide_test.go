package coverage

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// Tests of the watcher's decisions alone: no connection, no clock.

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

// at is t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

const margin = time.Minute

// step is one look and what it must decide. want's Fill, when set, is
// compared by value; the zero Next is not checked.
type step struct {
	name string
	o    Observation
	want Actions
	// row, when set, is what the row must be after the look.
	row *Row
	// filled: the watcher relays the fill the look asked for.
	filled bool
}

// covered is a look that finds the outbox covered by seen at s seconds,
// the WAL at lsn.
func covered(seen string, s float64, lsn pglogrepl.LSN) Look {
	return Look{Seen: seen, Covered: true, At: at(s), LSN: lsn}
}

func notCovered(s float64, lsn pglogrepl.LSN) Look {
	return Look{Why: "publication \"p\" does not publish table public.outbox", At: at(s), LSN: lsn}
}

// observeCases are TestObserve's: each a row loaded at start (nil for
// none) and a sequence of looks.
var observeCases = []struct {
	name   string
	loaded *Row
	steps  []step
}{{
	name: "published from the start and unchanged: recorded once, then looks rarely and saves every minute",
	steps: []step{
		{name: "first", o: Observation{Look: covered("A", 0, 0x100), Now: at(0)},
			want: Actions{Published: true, Save: true, Next: Quiet}, row: &Row{Seen: "A", VerifiedAt: at(0)}},
		{name: "unchanged", o: Observation{Look: covered("A", 5, 0x200), Now: at(5)},
			want: Actions{Published: true, Next: Quiet}, row: &Row{Seen: "A", VerifiedAt: at(5)}},
		{name: "not saved before saveEvery", o: Observation{Look: covered("A", 59, 0x280), Now: at(59)},
			want: Actions{Published: true, Next: Quiet}},
		{name: "saved again after saveEvery", o: Observation{Look: covered("A", 60, 0x300), Now: at(60)},
			want: Actions{Published: true, Save: true, Next: Quiet}},
	},
}, {
	name: "not published at the first look: the gap starts when the cycle's check saw it covered",
	steps: []step{
		{name: "first", o: Observation{Look: notCovered(3, 0x100), Now: at(3)},
			want: Actions{Opened: true, NotPublished: true, Save: true, GapOpen: true, Next: Busy},
			row:  &Row{Seen: "", VerifiedAt: at(0), GapFrom: at(0)}},
	},
}, {
	name: "dropped from the publication and added back: one gap, logged once, filled once the stream is past it",
	steps: []step{
		{name: "first", o: Observation{Look: covered("A", 0, 0x100), Now: at(0)},
			want: Actions{Published: true, Save: true, Next: Quiet}},
		{name: "dropped", o: Observation{Look: notCovered(10, 0x200), Now: at(1)},
			want: Actions{Opened: true, NotPublished: true, Save: true, GapOpen: true, Next: Busy},
			row:  &Row{Seen: "A", VerifiedAt: at(0), GapFrom: at(0)}},
		{name: "still dropped: not logged again", o: Observation{Look: notCovered(11, 0x300), Now: at(2)},
			want: Actions{GapOpen: true, Next: Busy}},
		{name: "added back", o: Observation{Look: covered("B", 12, 0x400), Now: at(3)},
			want: Actions{Published: true, Changed: true, Was: "A", Save: true, GapOpen: true, Next: Busy},
			row:  &Row{Seen: "B", VerifiedAt: at(12), GapFrom: at(0), GapTo: at(12), GapToLSN: 0x400}},
		{name: "the fill waits for a position read fillSlack after the gap", o: Observation{Look: covered("B", 12.5, 0x450), Handled: 0x900, Now: at(4)},
			want: Actions{Published: true, GapOpen: true, Next: Busy}},
		{name: "and for the pipeline to handle the stream up to it", o: Observation{Look: covered("B", 13, 0x500), Handled: 0x4ff, Now: at(5)},
			want: Actions{Published: true, GapOpen: true, Next: Busy}},
		{name: "then fills from gap_margin before the gap", o: Observation{Look: covered("B", 14, 0x600), Handled: 0x500, Now: at(6)},
			want:   Actions{Published: true, GapOpen: true, Next: Busy, Fill: &Window{From: at(0).Add(-margin), To: at(13)}},
			filled: true, row: &Row{Seen: "B", VerifiedAt: at(14)}},
		{name: "closed", o: Observation{Look: covered("B", 15, 0x700), Handled: 0x700, Now: at(7)},
			want: Actions{Published: true, Next: Quiet}},
	},
}, {
	name: "what covers the outbox changed between two looks (drop and add faster than a look): a gap from the last verified time",
	steps: []step{
		{name: "first", o: Observation{Look: covered("A", 0, 0x100), Now: at(0)},
			want: Actions{Published: true, Save: true, Next: Quiet}},
		{name: "changed", o: Observation{Look: covered("A2", 10, 0x200), Now: at(10)},
			want: Actions{Published: true, Opened: true, Changed: true, Was: "A", Save: true, GapOpen: true, Next: Busy},
			row:  &Row{Seen: "A2", VerifiedAt: at(10), GapFrom: at(0), GapTo: at(10), GapToLSN: 0x200}},
	},
}, {
	name: "dropped again before the gap was filled: the gap goes on from where it started, logged again",
	steps: []step{
		{name: "first", o: Observation{Look: covered("A", 0, 0x100), Now: at(0)},
			want: Actions{Published: true, Save: true, Next: Quiet}},
		{name: "dropped", o: Observation{Look: notCovered(1, 0x200), Now: at(1)},
			want: Actions{Opened: true, NotPublished: true, Save: true, GapOpen: true, Next: Busy}},
		{name: "added back", o: Observation{Look: covered("B", 2, 0x300), Now: at(2)},
			want: Actions{Published: true, Changed: true, Was: "A", Save: true, GapOpen: true, Next: Busy}},
		{name: "dropped again", o: Observation{Look: notCovered(3, 0x400), Now: at(3)},
			want: Actions{NotPublished: true, Save: true, GapOpen: true, Next: Busy},
			row:  &Row{Seen: "B", VerifiedAt: at(2), GapFrom: at(0)}},
	},
}, {
	name:   "a gap recorded by a relay that stopped before filling it is filled after a restart",
	loaded: &Row{Seen: "B", VerifiedAt: at(0), GapFrom: at(-100), GapTo: at(-50), GapToLSN: 0x100},
	steps: []step{
		{name: "first", o: Observation{Look: covered("B", 1, 0x200), Handled: 0x200, Now: at(1)},
			want:   Actions{Published: true, Save: true, GapOpen: true, Next: Busy, Fill: &Window{From: at(-100).Add(-margin), To: at(-49)}},
			filled: true},
	},
}, {
	name:   "a gap recorded while the outbox was not published, published at restart: its end is now",
	loaded: &Row{Seen: "A", VerifiedAt: at(-100), GapFrom: at(-100)},
	steps: []step{
		{name: "first", o: Observation{Look: covered("A", 1, 0x200), Now: at(1)},
			want: Actions{Published: true, Changed: true, Was: "A", Save: true, GapOpen: true, Next: Busy},
			row:  &Row{Seen: "A", VerifiedAt: at(1), GapFrom: at(-100), GapTo: at(1), GapToLSN: 0x200}},
	},
}, {
	name: "safe_at moves to the last look the slot's confirmed position passed, saved with the row's next write",
	steps: []step{
		{name: "first", o: Observation{Look: covered("A", 0, 0x100), Now: at(0)},
			want: Actions{Published: true, Save: true, Next: Quiet}},
		{name: "not passed", o: Observation{Look: covered("A", 1, 0x200), Confirmed: 0xff, Now: at(1)},
			want: Actions{Published: true, Next: Quiet}, row: &Row{Seen: "A", VerifiedAt: at(1)}},
		{name: "passed the first two", o: Observation{Look: covered("A", 2, 0x300), Confirmed: 0x200, Now: at(2)},
			want: Actions{Published: true, Next: Quiet}, row: &Row{Seen: "A", VerifiedAt: at(2), SafeAt: at(1)}},
	},
}}

func TestObserve(t *testing.T) {
	for _, tc := range observeCases {
		t.Run(tc.name, func(t *testing.T) {
			var loaded *Row
			if tc.loaded != nil {
				r := *tc.loaded
				loaded = &r
			}
			s := NewState(loaded, t0, margin)
			for _, st := range tc.steps {
				a := s.Observe(st.o)
				if a.Save {
					s.Saved(st.o.Now) // the watcher writes the row
				}
				if !sameActions(a, st.want) {
					t.Fatalf("%s: got %s\nwant %s", st.name, show(a), show(st.want))
				}
				if st.filled {
					s.Filled()
				}
				if st.row != nil && *s.Row != *st.row {
					t.Fatalf("%s: row %+v\nwant %+v", st.name, *s.Row, *st.row)
				}
			}
		})
	}
}

func sameActions(a, b Actions) bool {
	if (a.Fill == nil) != (b.Fill == nil) || a.Fill != nil && *a.Fill != *b.Fill {
		return false
	}
	a.Fill, b.Fill = nil, nil
	return a == b
}

func show(a Actions) string {
	s := ""
	if a.Fill != nil {
		s = " fill " + a.Fill.From.Sub(t0).String() + ".." + a.Fill.To.Sub(t0).String()
	}
	a.Fill = nil
	return fmtActions(a) + s
}

func fmtActions(a Actions) string {
	return "{" + flag("published", a.Published) + flag("opened", a.Opened) + flag("notPublished", a.NotPublished) +
		flag("changed("+a.Was+")", a.Changed) + flag("save", a.Save) + flag("gapOpen", a.GapOpen) + " next " + a.Next.String() + "}"
}

func flag(name string, on bool) string {
	if on {
		return " " + name
	}
	return ""
}

// TestMarksAreBounded: a slot that never confirms keeps at most maxMarks
// marks.
func TestMarksAreBounded(t *testing.T) {
	s := NewState(nil, t0, margin)
	for i := range 3 * maxMarks {
		s.Observe(Observation{Look: covered("A", float64(i), pglogrepl.LSN(0x100+i)), Now: at(float64(i))})
	}
	if len(s.marks) != maxMarks {
		t.Fatalf("%d marks, want %d", len(s.marks), maxMarks)
	}
}
