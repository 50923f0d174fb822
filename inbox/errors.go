package inbox

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidTable means Options.Table has an empty part or more than
	// two dot-separated parts.
	ErrInvalidTable = errors.New("inbox: invalid table name")
	// ErrInvalidOptions means an Options field is out of range (also the
	// options of a receive loop).
	ErrInvalidOptions = errors.New("inbox: invalid options")
	// ErrEmptyID means a message has no id: Process was called with an
	// empty one, or a receive loop found none where the message should
	// carry it (a Kafka record without the id header, a Service Bus
	// message without a MessageId).
	ErrEmptyID = errors.New("inbox: empty message id")
	// ErrTooManyAttempts means a message's effect failed
	// Retry.MaxAttempts times in a row (see ProcessRetrying): the message
	// is poison, and retrying it further is not expected to help.
	ErrTooManyAttempts = errors.New("inbox: effect failed too many times")
	// ErrPanicked means an effect panicked. Process recovers the panic,
	// rolls the transaction back and returns a *PanicError, which wraps
	// ErrPanicked; a receive loop treats it like any failing effect.
	ErrPanicked = errors.New("inbox: effect panicked")
)

// PanicError is the error Process returns (wrapped) when its effect
// panicked: the transaction was rolled back and nothing was recorded, as
// for an effect that returned an error. errors.Is(err, ErrPanicked)
// reports it; when the panic value is an error, errors.Is and errors.As
// also find that error.
type PanicError struct {
	// Value is what the effect panicked with.
	Value any
	// Stack is the stack of the panicking goroutine, as debug.Stack
	// formats it, for logs.
	Stack []byte
}

// Error returns "inbox: effect panicked: " and the panic value; it leaves
// out the stack (see Stack).
func (e *PanicError) Error() string {
	return fmt.Sprintf("%v: %v", ErrPanicked, e.Value)
}

// Unwrap returns ErrPanicked and, when the panic value is an error, that
// error.
func (e *PanicError) Unwrap() []error {
	if err, ok := e.Value.(error); ok {
		return []error{ErrPanicked, err}
	}
	return []error{ErrPanicked}
}
