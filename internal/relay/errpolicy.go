package relay

import (
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/explain"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/pipeline"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/replication"
)

// What a relay does when a cycle ends with an error is decided here, in
// one table (docs/design.md, "Error policy"): the error's kind, whether
// Run stops, starts a new cycle after the backoff, or at once, and what
// the operator is told.

// onError is what Run does after a cycle ended with an error.
type onError int

const (
	stop       onError = iota // return the error
	restart                   // a new cycle after the backoff
	restartNow                // a new cycle at once (the slot lost: wait for it again, as a standby)
)

func (a onError) String() string {
	return [...]string{"stop", "restart", "restart now"}[a]
}

// ErrStandbyPromoted ends a cycle when the standby the slot is read on
// (postgres.url) was promoted: the next cycle reads the slot and writes
// the state on it.
var ErrStandbyPromoted = errors.New("relay: the standby of postgres.url was promoted")

// transient marks an error of a fault that passes, found where the cycle
// failed: a server that could not be reached, state that could not be
// read, a sink that waited too long for its file's lock or could not
// read its progress at the destination.
type transient struct{ error }

func (e transient) Unwrap() error { return e.error }

// cycleEnd is how a cycle ended: whether it streamed (the slot existed
// where this process streamed), the position the slot was confirmed to,
// and its error (nil: ctx ended, a clean stop).
type cycleEnd struct {
	streamed  bool
	confirmed pglogrepl.LSN
	err       error
}

// errorRule is one row of the policy: the kind of error it takes, what
// Run does, and the operator's hint (nil: the error as it is).
type errorRule struct {
	kind string
	is   func(error) bool
	then onError
	hint func(r *Relay, c cycleEnd, err error) error
}

func isAny(kinds ...error) func(error) bool {
	return func(err error) bool {
		for _, k := range kinds {
			if errors.Is(err, k) {
				return true
			}
		}
		return false
	}
}

// errorPolicy is the table, first match wins. Every stop is also passed
// through explain's MissingSlot and InvalidSlot (onStop): the server may
// say why the stream could not go on whatever the error.
var errorPolicy = []errorRule{
	{kind: "postgres.url unreadable", is: isAny(pgconnect.ErrURL), then: stop},
	{kind: "role or database refused", is: pgconnect.Refused, then: stop,
		hint: func(_ *Relay, _ cycleEnd, err error) error { return pgconnect.ExplainRefused(err) }},
	{kind: "topology refused", is: isAny(replication.ErrStandbyNoPrimary, replication.ErrNotStandby, replication.ErrSameServer,
		replication.ErrNotPrimary, replication.ErrStandbyVersion, replication.ErrWALLevel), then: stop},
	{kind: "slot lost", is: isAny(replication.ErrSlotLost), then: restartNow},
	{kind: "protocol", is: isAny(decoder.ErrProtocol), then: restart,
		hint: func(_ *Relay, c cycleEnd, err error) error {
			return fmt.Errorf("%w; reconnecting from the confirmed position %s", err, c.confirmed)
		}},
	{kind: "standby promoted", is: isAny(ErrStandbyPromoted), then: restart},
	{kind: "stopped at a row", is: func(err error) bool { var s *pipeline.StopAtRow; return errors.As(err, &s) }, then: stop,
		hint: func(r *Relay, c cycleEnd, err error) error {
			var s *pipeline.StopAtRow
			errors.As(err, &s)
			return r.explain().Stop(s, c.confirmed)
		}},
	{kind: "publication gone", is: explain.IsPublicationGone, then: stop,
		hint: func(r *Relay, _ cycleEnd, err error) error { return r.explain().PublicationGone(err) }},
	{kind: "drain cut", is: isAny(ErrDrainCut), then: stop},
	{kind: "transient", is: func(err error) bool { var t transient; return errors.As(err, &t) }, then: restart},
	// PostgreSQL restarted, stopping or starting under any connection of
	// the cycle (a check, the dead letters, the sent_at marks...), by the
	// error's kind: a new cycle once the server is back. A sink's
	// permanent error stays a stop.
	{kind: "connection lost", is: func(err error) bool { return pgconnect.ConnLost(err) && !publish.IsPermanent(err) }, then: restart},
	{kind: "failed", is: func(error) bool { return true }, then: stop},
}

// ruleFor returns the rule of err (not nil).
func ruleFor(err error) errorRule {
	for _, rule := range errorPolicy {
		if rule.is(err) {
			return rule
		}
	}
	panic("relay: the error policy has no catch-all")
}

// onCycleEnd applies the policy to how a cycle ended: what Run does, and
// the error to return or log, with the operator's hint. held reports
// whether any cycle of this run streamed.
func (r *Relay) onCycleEnd(c cycleEnd, held bool) (onError, error) {
	if c.err == nil {
		return stop, nil
	}
	rule := ruleFor(c.err)
	err := c.err
	if rule.hint != nil {
		err = rule.hint(r, c, err)
	}
	if rule.then == stop {
		x := r.explain()
		err = x.InvalidSlot(x.MissingSlot(err, held))
	}
	return rule.then, err
}
