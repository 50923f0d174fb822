package replication

import (
	"context"
	"time"
)

// Gate bounds how many slots a process holds at once: a fleet of
// instances that share their sources holds at most max_active of them per
// instance (internal/fleet, docs/fleet.md). A stream with a Gate
// (StreamOptions.Gate) enters it before each attempt to take its slot
// (Acquire) and leaves it after an attempt that did not get the slot, and
// once it lets go of a slot it got: Release, or Run returning. A standby
// therefore holds nothing of the Gate while it waits between attempts.
// Implementations are safe for concurrent use.
type Gate interface {
	// Enter blocks until the stream may try to take its slot. It returns
	// ctx's error, having taken nothing, when ctx ends first.
	Enter(ctx context.Context) error
	// Leave gives back what the last Enter took. The stream calls it once
	// for each Enter that returned nil.
	Leave()
}

// SlotWaiter is a Gate that can tell a standby when its slot looks free
// (internal/fleet: one query per server and poll for every source waiting
// there). A stream whose slot is held elsewhere then waits in WaitFree
// between attempts, instead of trying the slot again every
// StreamOptions.SlotPoll, which costs a replication connection each time.
type SlotWaiter interface {
	// WaitFree returns once the slot looks free (no process holds it, or
	// it is gone), when it cannot tell (after about poll), or when ctx
	// ends.
	WaitFree(ctx context.Context, poll time.Duration)
}

// enter enters the stream's Gate before an attempt to take the slot (a
// no-op without one, or while it is entered).
func (s *Stream) enter(ctx context.Context) error {
	if s.opt.Gate == nil || s.entered {
		return nil
	}
	if err := s.opt.Gate.Enter(ctx); err != nil {
		return err
	}
	s.entered = true
	return nil
}

// leave leaves the stream's Gate, if entered.
func (s *Stream) leave() {
	if s.entered {
		s.entered = false
		s.opt.Gate.Leave()
	}
}
