package replication

import (
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/rawnet"
)

// logSwitches logs, at info, each low-level switch of the replication
// connection that the process was started with (see the package doc,
// "Switches"); unset switches log nothing.
func logSwitches(log zerolog.Logger) {
	rawnet.Setting().Log(log, "raw system calls on the replication socket (internal/rawnet)")
	logIgnoredSwitches(log)
}
