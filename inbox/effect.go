package inbox

import "runtime/debug"

// runEffect calls effect and turns a panic into a *PanicError, so that
// Process rolls back and returns it like an effect's error (see
// ErrPanicked). A runtime.Goexit is not a panic and is not stopped; the
// transaction is still rolled back by Process's deferred Rollback.
func runEffect(effect func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return effect()
}
