package rawnet

import (
	"os"
	"strings"

	"github.com/rs/zerolog"
)

// EnvRawSyscalls is the switch of raw system calls: WALPOST_RAWNET=off
// makes Wrap return every connection as it is, read and written through
// net.Conn.
const EnvRawSyscalls = "WALPOST_RAWNET"

// rawSwitch is EnvRawSyscalls as the process started with it.
var rawSwitch = EnvSwitch(EnvRawSyscalls)

// Setting returns the switch of raw system calls, read once when the
// process started.
func Setting() Switch { return rawSwitch }

// Switch is an operator's switch for one of the relay's low-level
// mechanisms: those below net.Conn or outside the ordinary Go path (raw
// system calls here). A mechanism is on unless its environment
// variable turns it off, so that an operator can rule it out when
// something hangs, without a config change. Each is read once, when the
// process starts; what each buys is measured by the bench
// (BENCHMARKS.md, "What each optimisation bought").
type Switch struct {
	Env   string // the variable, e.g. WALPOST_RAWNET
	Value string // its value when the process started ("" when unset)
	On    bool   // the mechanism is in use
}

// EnvSwitch reads the switch named env from the environment: off, false,
// no or 0 (in any case) turn the mechanism off; unset, empty, on, true,
// yes or 1 leave it on, and so does any other value (Known reports it).
func EnvSwitch(env string) Switch {
	return ParseSwitch(env, os.Getenv(env))
}

// ParseSwitch is EnvSwitch for the value v.
func ParseSwitch(env, v string) Switch {
	s := Switch{Env: env, Value: v, On: true}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "off", "false", "no", "0":
		s.On = false
	}
	return s
}

// Set reports whether the variable was set (to anything but "").
func (s Switch) Set() bool { return s.Value != "" }

// Known reports whether the value is one EnvSwitch understands (or unset).
func (s Switch) Known() bool {
	switch strings.ToLower(strings.TrimSpace(s.Value)) {
	case "", "off", "false", "no", "0", "on", "true", "yes", "1":
		return true
	}
	return false
}

// Log reports a switch that is set: at info what it does to the
// mechanism what (e.g. "raw system calls on the replication socket"), at
// warn a value it does not understand. An unset switch logs nothing.
func (s Switch) Log(log zerolog.Logger, what string) {
	switch {
	case !s.Set():
		return
	case !s.Known():
		log.Warn().Str("env", s.Env).Str("value", s.Value).Str("mechanism", what).Bool("on", s.On).
			Msg("low-level switch not understood (off turns the mechanism off); the mechanism stays on")
	case s.On:
		log.Info().Str("env", s.Env).Str("value", s.Value).Str("mechanism", what).Bool("on", true).
			Msg("low-level mechanism left on by the environment")
	default:
		log.Info().Str("env", s.Env).Str("value", s.Value).Str("mechanism", what).Bool("on", false).
			Msg("low-level mechanism switched off by the environment")
	}
}
