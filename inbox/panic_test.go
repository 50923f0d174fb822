package inbox

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestIntegrationPanickingEffectIsRolledBackAndReturnedAsAnError: an
// effect that changes the database and then panics leaves nothing behind
// (no id, no change), Process returns an error wrapping ErrPanicked with
// the panic value and stack instead of panicking, the connection goes
// back to the pool (one connection: a leaked transaction would block the
// next call), and the redelivery processes the message.
func TestIntegrationPanickingEffectIsRolledBackAndReturnedAsAnError(t *testing.T) {
	errValue := errors.New("nil map in effect")
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			f := newFixture(t)
			ib := f.open(t, v, Options{}, 1)
			ctx := context.Background()

			for i, value := range []any{errValue, "index out of range"} {
				res, err := ib.process(ctx, "msg-1", func(ctx context.Context, exec execFunc) error {
					if err := f.increment(exec); err != nil {
						return err
					}
					panic(value)
				})
				if res != 0 || !errors.Is(err, ErrPanicked) {
					t.Fatalf("panic %d: Process returned %v, %v; want an error wrapping ErrPanicked", i, res, err)
				}
				var pe *PanicError
				if !errors.As(err, &pe) || pe.Value != value || !strings.Contains(string(pe.Stack), "panic_test.go") {
					t.Fatalf("panic %d: error %v does not carry the panic value %v and its stack", i, err, value)
				}
				if isErr := errors.Is(err, errValue); isErr != (value == errValue) {
					t.Errorf("panic %d: errors.Is(err, the panic value) = %v", i, isErr)
				}
				if !strings.Contains(err.Error(), `"msg-1"`) || !strings.Contains(err.Error(), "panicked") {
					t.Errorf("panic %d: error %q does not name the message and the panic", i, err)
				}
				if n := f.count(t, "true"); n != 0 || f.effects(t) != 0 {
					t.Fatalf("panic %d: %d inbox rows, %d effects; want none (rolled back)", i, n, f.effects(t))
				}
			}

			res, err := ib.process(ctx, "msg-1", func(ctx context.Context, exec execFunc) error { return f.increment(exec) })
			if err != nil || res != Processed {
				t.Fatalf("redelivery after the panics: %v, %v; want Processed", res, err)
			}
			if f.count(t, "id = 'msg-1'") != 1 || f.effects(t) != 1 {
				t.Fatalf("after the redelivery: %d inbox rows, %d effects; want 1 and 1", f.count(t, "true"), f.effects(t))
			}
		})
	}
}

// runEffect turns every panic into a *PanicError, panic(nil) included, and
// its message and Unwrap give the value.
func TestPanicErrorWrapsErrPanickedAndAnErrorValue(t *testing.T) {
	err := runEffect(func() error { panic(nil) })
	if !errors.Is(err, ErrPanicked) {
		t.Fatalf("panic(nil): %v, want an error wrapping ErrPanicked", err)
	}
	if err := runEffect(func() error { return nil }); err != nil {
		t.Fatalf("no panic: %v", err)
	}
	inner := errors.New("inner")
	err = runEffect(func() error { panic(inner) })
	if !errors.Is(err, inner) || err.Error() != "inbox: effect panicked: inner" {
		t.Fatalf("panic(error): %q, want it to wrap the error and read %q", err, "inbox: effect panicked: inner")
	}
}
