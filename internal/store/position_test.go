package store

import (
	"testing"

	"github.com/jackc/pglogrepl"

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

// TestParseAtReadsWhatFormatAtWrites: positions as cdc skip and cdc
// dead-letter take them.
func TestParseAtReadsWhatFormatAtWrites(t *testing.T) {
	for _, c := range []struct {
		lsn pglogrepl.LSN
		seq uint32
		s   string
	}{{0x16B3748, 0, "0/16B3748"}, {0x16B3748, 2, "0/16B3748:2"}} {
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
	}
	for _, bad := range []string{"", "16B3748", "0/16B3748:", "0/16B3748:x", "0/16B3748:-1", "0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31"} {
		if _, _, ok := ParseAt(bad); ok {
			t.Errorf("ParseAt(%q) took it for a position", bad)
		}
	}
}
