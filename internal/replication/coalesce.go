package replication

import (
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/rawnet"
)

// EnvCoalesce was the switch of coalesced reads (SO_RCVLOWAT while the
// stream is behind), removed by issue 34: over three full bench runs
// the mechanism never showed a clear end-to-end gain (BENCHMARKS.md, "What
// each optimisation bought"), and reads are now always eager. The variable
// is still read, only to tell an operator who sets it that it does
// nothing (logIgnoredSwitches).
const EnvCoalesce = "WALPOST_COALESCE"

// coalesceSwitch is EnvCoalesce as the process started with it.
var coalesceSwitch = rawnet.EnvSwitch(EnvCoalesce)

// logIgnoredSwitches warns of each removed switch the process was started
// with; unset, they log nothing.
func logIgnoredSwitches(log zerolog.Logger) {
	if coalesceSwitch.Set() {
		log.Warn().Str("env", coalesceSwitch.Env).Str("value", coalesceSwitch.Value).
			Msg("WALPOST_COALESCE is ignored: coalesced reads were removed (they showed no clear gain in the bench), reads are always eager; unset it")
	}
}
