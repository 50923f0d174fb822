package publish

import (
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/message"
)

// TestDescribeNamesIDAndLSN: the forms every sink's errors use to name a
// message and a call.
func TestDescribeNamesIDAndLSN(t *testing.T) {
	a := &message.Message{ID: "a1", LSN: pglogrepl.LSN(0x16B3748)}
	b := &message.Message{ID: "b2", LSN: pglogrepl.LSN(0x16B3800)}
	if got, want := Describe(a), "message a1 (lsn 0/16B3748)"; got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
	if got, want := DescribeCall([]*message.Message{a, b}), "2 messages (first a1, lsn 0/16B3748)"; got != want {
		t.Errorf("DescribeCall = %q, want %q", got, want)
	}
}

// TestDonePrefixMarksTheFirstK: DonePrefix(n, k) holds n entries, the
// first k true; with k = 0 Partial leaves the error unmarked.
func TestDonePrefixMarksTheFirstK(t *testing.T) {
	if got := DonePrefix(4, 2); !slices.Equal(got, []bool{true, true, false, false}) {
		t.Errorf("DonePrefix(4, 2) = %v", got)
	}
	if got := DonePrefix(3, 0); !slices.Equal(got, []bool{false, false, false}) {
		t.Errorf("DonePrefix(3, 0) = %v", got)
	}
}

// TestNameErrorNamesTheMessageAndTheTemplate: the error for a name a
// template gave that the destination does not take.
func TestNameErrorNamesTheMessageAndTheTemplate(t *testing.T) {
	m := &message.Message{ID: "a1", LSN: pglogrepl.LSN(0x16B3748), Type: "order created"}
	cause := errors.New("a space")
	err := NameError(m, "topic", "orders.order created", "orders.{type}", cause)
	want := `message a1 (lsn 0/16B3748, type "order created"): topic "orders.order created" from template "orders.{type}": a space`
	if err.Error() != want || !errors.Is(err, cause) {
		t.Errorf("NameError = %v, want %s wrapping the cause", err, want)
	}
}
