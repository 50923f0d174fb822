package main

import (
	"github.com/walpost/walpost/internal/ops"
)

// statusCmd is cdc status [--json]. It exits 1 (an error) when the slot is
// missing or cdc run would refuse it, after printing what it found
// (ops.Status.Err).
func statusCmd(e *cmdEnv) error {
	room, err := ops.Open(e.ctx, e.cfg, ops.Options{Log: e.log})
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
	return st.Err(e.opts.config)
}
