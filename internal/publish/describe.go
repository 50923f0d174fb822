package publish

import (
	"fmt"

	"github.com/walpost/walpost/internal/message"
)

// Describe names m in an error: "message <id> (lsn <lsn>)". Every sink
// names the message an error concerns this way, so that an operator finds
// it in the outbox (by id) and in the WAL (by LSN) whichever sink
// reported it; the sink adds where the message went ("to topic …").
func Describe(m *message.Message) string {
	return "message " + m.ID + " (lsn " + m.LSN.String() + ")"
}

// DescribeCall names the messages of a Publish call, or of a part of it,
// in an error about all of them (a context that ended, a connection that
// failed): "<n> messages (first <id>, lsn <lsn>)". msgs is not empty.
func DescribeCall(msgs []*message.Message) string {
	return fmt.Sprintf("%d messages (first %s, lsn %s)", len(msgs), msgs[0].ID, msgs[0].LSN)
}

// DonePrefix returns the done list (see Partial) of a call of n messages
// of which the first k are durable: the form of a sink that delivers in
// order and stops at its first failure.
func DonePrefix(n, k int) []bool {
	done := make([]bool, n)
	for i := range k {
		done[i] = true
	}
	return done
}

// NameError is the error for m when what (a topic, subject, exchange,
// routing key), expanded for it from template, is name, which is not one
// the destination takes: "message <id> (lsn <lsn>, type <type>): <what>
// <name> from template <template>: <err>". The type is named because
// templates draw on it. A sink marks it Rejected, prefixed with its kind.
func NameError(m *message.Message, what, name, template string, err error) error {
	return fmt.Errorf("message %s (lsn %s, type %q): %s %q from template %q: %w", m.ID, m.LSN, m.Type, what, name, template, err)
}
