package publish

import (
	"context"
	"errors"
)

// ErrLocked is wrapped by the error of opening a sink whose file another
// process holds (the file sink's lock, held by a running cdc run) under a
// context from NoLockWait.
var ErrLocked = errors.New("the file is locked by another process (a running cdc run holds its file sink's file while it runs)")

type noLockWaitKey struct{}

// NoLockWait returns ctx under which opening a sink that another process
// holds fails at once with ErrLocked instead of waiting for it: for the
// commands that publish beside a running relay (cdc dead-letter resend and
// drop, the console's actions), where the wait would last as long as the
// relay runs.
func NoLockWait(ctx context.Context) context.Context {
	return context.WithValue(ctx, noLockWaitKey{}, true)
}

// LockWait reports whether opening a sink under ctx may wait for a lock
// another process holds (not under NoLockWait).
func LockWait(ctx context.Context) bool {
	no, _ := ctx.Value(noLockWaitKey{}).(bool)
	return !no
}
