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
	want := map[string]string{"walpost-claim-check": "s3://b/k", "walpost-claim-check-size": "1048576", "walpost-claim-check-sha256": "ab"}
	h := map[string]string{"walpost-claim-check": "s3://other/forged"} // a row's: left out
	for i := range 12 {
		h[fmt.Sprintf("a%02d", i)] = "v"
	}
	var dropped []string
	m := &message.Message{ID: "id", Type: "t", Payload: []byte{}, Headers: h, ClaimCheck: &message.ClaimRef{Ref: "s3://b/k", Size: 1 << 20, SHA256: "ab"}}
	_, attrs, _ := Encode(m, nil, func(name, why string) { dropped = append(dropped, name) })
	for n, v := range want {
		if attrs[n] != v {
			t.Errorf("%s is %q, want %q (dropped %v)", n, attrs[n], v, dropped)
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
