package store

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/message"
)

// TestPositionCoversRowsUpToItsSeq: a position inside a group of rows
// that share an LSN covers the rows up to its seq, not the rest of the
// group; LSN and commit order come first.
func TestPositionCoversRowsUpToItsSeq(t *testing.T) {
	p := Position{CommitLSN: 0x500, LSN: 0x200, Seq: 2}
	cases := []struct {
		commit, lsn pglogrepl.LSN
		seq         uint32
		want        bool
	}{
		{0x500, 0x200, 0, true},
		{0x500, 0x200, 2, true},
		{0x500, 0x200, 3, false},
		{0x500, 0x1FF, 90, true},
		{0x500, 0x201, 0, false},
		{0x400, 0x900, 9, true},
		{0x600, 0x100, 0, false},
	}
	for _, c := range cases {
		m := &message.Message{CommitLSN: c.commit, LSN: c.lsn, Seq: c.seq}
		if got := p.Covers(m); got != c.want {
			t.Errorf("%+v covers (%s, %s, %d) = %v, want %v", p, c.commit, c.lsn, c.seq, got, c.want)
		}
	}
}

// streamOrder is messages in stream order, (CommitLSN, LSN, Seq)
// ascending: transactions whose rows lie before an earlier transaction's
// commit (interleaved writers), groups of rows at one LSN (COPY), and the
// extremes of each field.
var streamOrder = []*message.Message{
	{CommitLSN: 0x100, LSN: 0x0, Seq: 0},
	{CommitLSN: 0x100, LSN: 0x80, Seq: 0},
	{CommitLSN: 0x100, LSN: 0x80, Seq: 1},
	{CommitLSN: 0x100, LSN: 0x80, Seq: 1<<32 - 1},
	{CommitLSN: 0x100, LSN: 0x90, Seq: 0},
	{CommitLSN: 0x200, LSN: 0x50, Seq: 0}, // began before the first committed
	{CommitLSN: 0x200, LSN: 0x1F0, Seq: 7},
	{CommitLSN: 0x1_0000_0000, LSN: 0xFFFF_FFFF, Seq: 0}, // across a 4 GiB boundary
	{CommitLSN: 0x1_0000_0000, LSN: 0x1_0000_0000 - 1, Seq: 3},
	{CommitLSN: 1<<64 - 1, LSN: 1<<64 - 2, Seq: 0},
}

// TestPositionOrdersMessagesByCommitThenLSNThenSeq: the position of the
// i-th message in stream order covers exactly the messages 0..i, so that
// a sink's saved position skips what it acknowledged and nothing after.
func TestPositionOrdersMessagesByCommitThenLSNThenSeq(t *testing.T) {
	for i, at := range streamOrder {
		p := PositionOf(at)
		for j, m := range streamOrder {
			if got, want := p.Covers(m), j <= i; got != want {
				t.Errorf("position of #%d (%s, %s, %d) covers #%d (%s, %s, %d) = %v, want %v",
					i, at.CommitLSN, at.LSN, at.Seq, j, m.CommitLSN, m.LSN, m.Seq, got, want)
			}
		}
	}
}

// TestPositionOfKeepsTheMessagesFields: the commit time comes along, for
// `cdc recover`.
func TestPositionOfKeepsTheMessagesFields(t *testing.T) {
	at := time.Date(2024, 5, 1, 12, 0, 0, 123000, time.UTC)
	m := &message.Message{ID: "x", CommitLSN: 0x30, LSN: 0x20, Seq: 4, CommitTime: at}
	want := Position{CommitLSN: 0x30, LSN: 0x20, Seq: 4, CommitTime: at}
	if got := PositionOf(m); got != want {
		t.Fatalf("PositionOf = %+v, want %+v", got, want)
	}
}

// TestProgressKeepsTheFurthestPositionPerSink: an acknowledgement at or
// before what a sink already acknowledged (a redelivery after a restart,
// a late ack) does not move its saved position back, nor mark it for
// writing; one after it does.
func TestProgressKeepsTheFurthestPositionPerSink(t *testing.T) {
	loaded := map[string]Position{"a": PositionOf(streamOrder[4])}
	s := NewProgress("", Tables{}, loaded, zerolog.Nop())
	s.Acked("a", PositionOf(streamOrder[2]))
	s.Acked("a", PositionOf(streamOrder[4]))
	if s.dirty || s.pos["a"] != loaded["a"] {
		t.Fatalf("after acks at or before the loaded position: %+v, dirty %v; want %+v unchanged", s.pos["a"], s.dirty, loaded["a"])
	}
	s.Acked("a", PositionOf(streamOrder[6]))
	s.Acked("b", PositionOf(streamOrder[1]))
	s.Acked("a", PositionOf(streamOrder[5]))
	if !s.dirty || s.pos["a"] != PositionOf(streamOrder[6]) || s.pos["b"] != PositionOf(streamOrder[1]) {
		t.Fatalf("after later acks: a %+v, b %+v, dirty %v", s.pos["a"], s.pos["b"], s.dirty)
	}
	if loaded["a"] != PositionOf(streamOrder[4]) {
		t.Fatal("Acked changed the map NewProgress was given")
	}
}

// TestParseAtReadsWhatFormatAtWrites: positions as cdc skip and cdc
// dead-letter take them.
func TestParseAtReadsWhatFormatAtWrites(t *testing.T) {
	for _, c := range []struct {
		lsn pglogrepl.LSN
		seq uint32
		s   string
	}{
		{0x16B3748, 0, "0/16B3748"},
		{0x16B3748, 2, "0/16B3748:2"},
		{0, 0, "0/0"},
		{0x1_0000_0000, 0, "1/0"},
		{0xA_0000_00FF, 1<<32 - 1, "A/FF:4294967295"},
		{1<<64 - 1, 1, "FFFFFFFF/FFFFFFFF:1"},
	} {
		if got := FormatAt(c.lsn, c.seq); got != c.s {
			t.Fatalf("FormatAt(%s, %d) = %q, want %q", c.lsn, c.seq, got, c.s)
		}
		lsn, seq, ok := ParseAt(c.s)
		wantSeq := int64(c.seq)
		if c.seq == 0 {
			wantSeq = -1 // a bare LSN names every row at it
		}
		if !ok || lsn != c.lsn || seq != wantSeq {
			t.Fatalf("ParseAt(%q) = %s, %d, %v", c.s, lsn, seq, ok)
		}
		p := Parked{LSN: c.lsn, Seq: c.seq}
		if p.At() != c.s || p.Name() != c.s {
			t.Fatalf("Parked at (%s, %d) without id: At %q, Name %q, want %q", c.lsn, c.seq, p.At(), p.Name(), c.s)
		}
	}
	// An LSN as PostgreSQL may print it, in lower case or with leading
	// zeros, and an explicit :0.
	for s, want := range map[string]struct {
		lsn pglogrepl.LSN
		seq int64
	}{
		"0/16b3748":   {0x16B3748, -1},
		"00000000/01": {1, -1},
		"0/1:0":       {1, 0},
		"0/1:007":     {1, 7},
	} {
		if lsn, seq, ok := ParseAt(s); !ok || lsn != want.lsn || seq != want.seq {
			t.Errorf("ParseAt(%q) = %s, %d, %v, want %s, %d", s, lsn, seq, ok, want.lsn, want.seq)
		}
	}
	for _, bad := range []string{
		"", "16B3748", "/", "0/", "/1", "0/16B3748:", "0/16B3748:x", "0/16B3748:-1", "0/16B3748:+1",
		"0/1:4294967296", // seq over 32 bits
		"0/1:2:3",
		"0/100000000", "100000000/0", // a half over 32 bits, which pglogrepl.ParseLSN wraps
		"000000000/1",                                                   // nine digits, which PostgreSQL refuses
		"0/1x", "0/1 ", " 0/1", "0/ 1", "1/2/3", "0x1/1", "-0/1", "G/1", // text around or inside an LSN
		"0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31", // a message id
	} {
		if lsn, seq, ok := ParseAt(bad); ok {
			t.Errorf("ParseAt(%q) took it for position %s, %d", bad, lsn, seq)
		}
	}
}

// TestParkedIsNamedByItsIDElseItsPosition: what commands print for a
// parked row.
func TestParkedIsNamedByItsIDElseItsPosition(t *testing.T) {
	p := Parked{ID: "0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31", LSN: 0x16B3748, Seq: 2}
	if p.Name() != p.ID || p.At() != "0/16B3748:2" {
		t.Fatalf("Name %q, At %q", p.Name(), p.At())
	}
	p.ID = ""
	if p.Name() != "0/16B3748:2" {
		t.Fatalf("without id: Name %q", p.Name())
	}
}
