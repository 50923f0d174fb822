package pipeline

// Policy is what the relay does with a row it cannot map (relay.on_invalid;
// Options.Invalid) or a message a sink refuses for good (relay.on_refused;
// SettlerOptions.Refused), one of three; the config's words map to them
// one for one: stop, dead_letter, hold_key (relay.policyOf). Keys held
// before stay held whatever the policy (Options.Holds, SettlerOptions.Holds).
type Policy int

const (
	// Stop parks nothing: the relay stops at it, having delivered
	// everything before it.
	Stop Policy = iota
	// Park parks it in the dead-letter table and goes on.
	Park
	// HoldKey parks it as the head of its ordering key ("Held keys" in
	// docs/design.md), and every later message of the key behind it until
	// the key is released.
	HoldKey
)

// Parks reports whether p parks (Park or HoldKey) rather than stops.
func (p Policy) Parks() bool { return p == Park || p == HoldKey }

// holds reports whether p parks as the head of a held key.
func (p Policy) holds() bool { return p == HoldKey }

func (p Policy) String() string {
	switch p {
	case Park:
		return "park"
	case HoldKey:
		return "hold_key"
	}
	return "stop"
}
