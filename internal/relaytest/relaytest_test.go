package relaytest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLineCounterCountsCompleteLinesOfAGrowingFile: appended lines are
// counted, a torn last line only once complete, lines longer than the
// read buffer too; a file cut back (a torn tail repaired) or gone is
// counted anew.
func TestLineCounterCountsCompleteLinesOfAGrowingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	c := NewLineCounter(path)
	if n := c.Count(); n != 0 {
		t.Fatalf("missing file: %d", n)
	}
	write := func(s string) {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string, want int) {
		t.Helper()
		if n := c.Count(); n != want || n != CountLines(path) {
			t.Fatalf("%s: Count %d, CountLines %d, want %d", when, n, CountLines(path), want)
		}
	}
	write("a\nb\n")
	check("two lines", 2)
	write("torn")
	check("a torn line", 2)
	if err := os.Truncate(path, 4); err != nil { // the torn tail cut off
		t.Fatal(err)
	}
	check("after the cut", 2)
	write("c\n" + strings.Repeat("x", 3<<20) + "\nd")
	check("a line longer than the buffer", 4)
	write("\n")
	check("the last line completed", 5)
	if err := os.Truncate(path, 2); err != nil {
		t.Fatal(err)
	}
	check("cut back to one line", 1)
	os.Remove(path)
	check("gone", 0)
	write("e\n")
	check("made anew", 1)
}
