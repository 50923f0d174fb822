package admin

import "errors"

// ErrSlotActive: a process (a running relay) holds the slot that cdc skip,
// recover or resync must find free. The error returned wraps it with the
// slot, the process and what to do.
var ErrSlotActive = errors.New("admin: the slot is in use")
