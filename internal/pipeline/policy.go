package pipeline

// Policy is what the relay does with a row it cannot map (relay.on_invalid;
// Options.Invalid) or a message a sink refuses for good (relay.on_refused;
// SettlerOptions.Refused): two choices, made apart. The config's words map
// to it as stop {}, dead_letter {Park} and hold_key {Park, Hold}
// (relay.policyOf).
type Policy struct {
	// Park parks it in the dead-letter table and goes on; without Park
	// the relay stops at it, having delivered everything before it.
	Park bool
	// Hold holds its ordering key ("Held keys" in docs/design.md): it is
	// parked as the key's head and every later message of the key is
	// parked behind it until the key is released. Hold without Park is
	// expressible but not a config word: nothing is parked, so there is
	// no head, and the relay stops at it as without Park; keys held
	// before stay held either way (Options.Holds, SettlerOptions.Holds).
	Hold bool
}

// holds reports whether p parks as the head of a held key.
func (p Policy) holds() bool { return p.Park && p.Hold }
