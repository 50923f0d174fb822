package relay

import (
	"testing"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/pipeline"
)

// TestPolicyOfMapsEachConfigWordToItsPair: relay.on_invalid's and
// on_refused's words reach the pipeline as (park, hold): stop parks
// nothing, dead_letter parks, hold_key parks and holds the key.
func TestPolicyOfMapsEachConfigWordToItsPair(t *testing.T) {
	for word, want := range map[config.Policy]pipeline.Policy{
		config.Stop:       pipeline.Stop,
		config.DeadLetter: pipeline.Park,
		config.HoldKey:    pipeline.HoldKey,
	} {
		if got := policyOf(word); got != want {
			t.Errorf("policyOf(%s) = %s, want %s", word, got, want)
		}
	}
}
