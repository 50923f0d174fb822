package main

import (
	"fmt"

	"github.com/walpost/walpost/internal/ops"
)

// heldExit is cdc status's exit code when nothing is wrong but keys are
// held: messages wait for an operator (fix the head, then resend or
// release it).
const heldExit = 4

// statusCmd is cdc status [--json]. It exits 1 (an error) when the slot is
// missing or cdc run would refuse it, after printing what it found
// (ops.Status.Err); heldExit when it is not but keys are held.
func statusCmd(e *cmdEnv) error {
	room, err := ops.Open(e.ctx, e.cfg, ops.Options{Log: e.log, CheckProgressTopics: true})
	if err != nil {
		return err
	}
	defer room.Close()
	st, err := room.Status(e.ctx)
	if err != nil {
		return err
	}
	if e.opts.json {
		if err := ops.WriteJSON(e.stdout, st); err != nil {
			return err
		}
	} else {
		ops.WriteStatus(e.stdout, st)
	}
	if err := st.Err(e.opts.config); err != nil || len(st.HeldKeys) == 0 {
		return err
	}
	return &exitCode{code: heldExit, error: fmt.Errorf("%d key(s) held behind a parked message (held keys above): fix that message, then cdc dead-letter resend "+
		"(or drop) it, or Release it on the console; the key's other messages follow in order", len(st.HeldKeys))}
}
