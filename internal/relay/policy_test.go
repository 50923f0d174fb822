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
		config.Stop:       {},
		config.DeadLetter: {Park: true},
		config.HoldKey:    {Park: true, Hold: true},
	} {
		if got := policyOf(word); got != want {
			t.Errorf("policyOf(%s) = %+v, want %+v", word, got, want)
		}
	}
}
