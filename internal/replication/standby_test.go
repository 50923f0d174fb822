package replication

import (
	"strings"
	"testing"
)

// TestStandbyTopologyCautionsNameWhatThreatensTheSlot: a standby without
// hot_standby_feedback or without a physical slot is warned about (not
// refused), a promoted standby is told to drop postgres.primary_url, a
// primary is not warned about.
func TestStandbyTopologyCautionsNameWhatThreatensTheSlot(t *testing.T) {
	for _, c := range []struct {
		name string
		t    Topology
		want []string
	}{
		{"primary", Topology{Version: 160000}, nil},
		{"standby as advised", Topology{Standby: true, Version: 160000, Feedback: true, PrimarySlot: "s1"}, nil},
		{"no feedback", Topology{Standby: true, Version: 160000, PrimarySlot: "s1"}, []string{"hot_standby_feedback is off"}},
		{"no physical slot", Topology{Standby: true, Version: 170000, Feedback: true}, []string{"without a physical slot"}},
		{"neither", Topology{Standby: true, Version: 180000}, []string{"hot_standby_feedback is off", "without a physical slot"}},
		{"promoted", Topology{Promoted: true, Version: 160000}, []string{"remove postgres.primary_url"}},
	} {
		got := c.t.Cautions()
		if len(got) != len(c.want) {
			t.Errorf("%s: %d cautions %q, want %d", c.name, len(got), got, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: caution %d is %q, want it to say %q", c.name, i, got[i], w)
			}
		}
	}
	if d := (Topology{Standby: true, Version: 160000, Feedback: true, PrimarySlot: "s1"}).Describe(); !strings.Contains(d, "PostgreSQL 16, hot_standby_feedback on, physical slot s1") {
		t.Errorf("Describe: %q", d)
	}
}

// TestInvalidReasonOfAConflictOnPostgres16: 16 reports a standby slot's
// conflict by conflicting alone, 17+ by invalidation_reason rows_removed;
// both say what happened and point at hot_standby_feedback.
func TestInvalidReasonOfAConflictOnPostgres16(t *testing.T) {
	pg16 := SlotInfo{Exists: true, WALStatus: "lost", Conflicting: true}
	pg17 := SlotInfo{Exists: true, WALStatus: "lost", Conflicting: true, Invalidation: "rows_removed"}
	removed := SlotInfo{Exists: true, WALStatus: "lost"}
	for _, s := range []SlotInfo{pg16, pg17} {
		if !s.Invalid() || !strings.Contains(s.InvalidReason(), "hot_standby_feedback") {
			t.Errorf("%+v: Invalid %v, reason %q", s, s.Invalid(), s.InvalidReason())
		}
	}
	if pg16.ReasonNote() != ", conflicting" || pg17.ReasonNote() != ", invalidation_reason rows_removed" || removed.ReasonNote() != "" {
		t.Errorf("notes: %q, %q, %q", pg16.ReasonNote(), pg17.ReasonNote(), removed.ReasonNote())
	}
	if !strings.Contains(removed.InvalidReason(), "max_slot_wal_keep_size") {
		t.Errorf("a slot lost without a conflict: %q", removed.InvalidReason())
	}
}
