package sqs

import (
	"fmt"
	"testing"

	"github.com/walpost/walpost/internal/message"
)

// TestClaimCheckHeadersTakeTheFirstAttributes: a claim-checked message's
// reference headers are never the ones left out for SQS's ten
// attributes, however many headers the row has: without them the
// receiver has no payload.
func TestClaimCheckHeadersTakeTheFirstAttributes(t *testing.T) {
	h := map[string]string{"walpost-claim-check": "s3://b/k", "walpost-claim-check-size": "1048576", "walpost-claim-check-sha256": "ab"}
	for i := range 12 {
		h[fmt.Sprintf("a%02d", i)] = "v"
	}
	var dropped []string
	_, attrs, _ := Encode(&message.Message{ID: "id", Type: "t", Payload: []byte{}, Headers: h}, nil, func(name, why string) { dropped = append(dropped, name) })
	for _, n := range []string{"walpost-claim-check", "walpost-claim-check-size", "walpost-claim-check-sha256"} {
		if attrs[n] != h[n] {
			t.Errorf("%s left out (dropped %v)", n, dropped)
		}
	}
	if len(dropped) == 0 {
		t.Fatal("no header dropped: the test no longer fills the ten attributes")
	}
}
