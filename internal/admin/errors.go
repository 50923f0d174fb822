package admin

import (
	"errors"
	"fmt"
)

// ErrSlotActive: a process (a running relay) holds the slot that cdc skip,
// recover or resync must find free. The error returned wraps it with the
// slot, the process and what to do (slotInUse).
var ErrSlotActive = errors.New("admin: the slot is in use")

// slotInUse is the error of command (skip, recover, resync) for slot,
// held by process pid.
func slotInUse(command, slot string, pid int32) error {
	return fmt.Errorf("%w: slot %q is held by process %d (a running relay?): stop every relay on the slot, then run cdc %s again", ErrSlotActive, slot, pid, command)
}
