package awsbatch

import (
	"fmt"
	"strings"
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

func TestGroupIDKeepsLegalKeysAndHashesOthers(t *testing.T) {
	if got := GroupID("order-1/x:y"); got != "order-1/x:y" {
		t.Errorf("GroupID of a legal key = %q", got)
	}
	for _, k := range []string{"kunde äöü", "a b", strings.Repeat("x", 129), "", "sha256:abc"} {
		got := GroupID(k)
		if !strings.HasPrefix(got, "sha256:") || len(got) != 7+64 || got != GroupID(k) {
			t.Errorf("GroupID(%q) = %q", k, got)
		}
	}
}

func TestValidBody(t *testing.T) {
	for s, want := range map[string]bool{"{}": true, "ä\t\n": true, "\x00": false, "\xff": false, "\uFFFE": false, "\U0001F600": true} {
		if ValidBody([]byte(s)) != want {
			t.Errorf("ValidBody(%q) != %v", s, want)
		}
	}
}
