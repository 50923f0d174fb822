package testutil

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestBufferKeepsEveryWriteOfConcurrentWriters: lines written from many
// goroutines while another reads all arrive whole; Max drops what comes
// after it is reached; Reset empties.
func TestBufferKeepsEveryWriteOfConcurrentWriters(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				fmt.Fprintf(&b, "line %d.%d\n", i, j)
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 800 || b.Len() != len(b.String()) {
		t.Fatalf("%d lines, Len %d for %d bytes; want 800 lines", n, b.Len(), len(b.String()))
	}
	b.Reset()
	if b.Len() != 0 || b.String() != "" {
		t.Fatalf("after Reset: %q", b.String())
	}

	capped := Buffer{Max: 10}
	for _, s := range []string{"12345", "67890", "abc"} {
		if n, err := capped.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if capped.String() != "1234567890" {
		t.Fatalf("capped at 10: %q", capped.String())
	}
}
