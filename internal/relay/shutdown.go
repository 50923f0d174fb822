package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/walpost/walpost/internal/pipeline"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/replication"
)

// shutdown is one cycle's shutdown protocol (see the package doc), in one
// place:
//   - read is live while the stream may read: it ends when the run's
//     context ends, when a stage fails (the errgroup's context), or when
//     the pipeline stops at a bad row or a protocol error (stopReading);
//   - sinks is live while the runners may publish: it ends when a stage
//     fails, or relay.shutdown_timeout after the run's context ended;
//   - drained is closed once every runner returned: the stream then sends
//     its final status, the progress store its last positions.
type shutdown struct {
	read        context.Context
	stopReading context.CancelFunc
	sinks       context.Context
	drained     chan struct{}
	timeout     time.Duration
	release     []func() bool
	cancels     []context.CancelFunc
}

func newShutdown(ctx, gctx context.Context, timeout time.Duration, drained chan struct{}) *shutdown {
	sd := &shutdown{drained: drained, timeout: timeout}
	sd.read, sd.stopReading = context.WithCancel(gctx)
	var cancelSinks context.CancelFunc
	sd.sinks, cancelSinks = context.WithCancel(gctx)
	sd.cancels = []context.CancelFunc{sd.stopReading, cancelSinks}
	sd.release = []func() bool{
		context.AfterFunc(ctx, sd.stopReading),
		context.AfterFunc(ctx, func() { time.AfterFunc(timeout, cancelSinks) }),
	}
	return sd
}

// stopAndDrain stops reading, drops what the stream still hands on, and
// waits (at most the shutdown timeout) until the sinks drained what came
// before: everything before a bad row is delivered and confirmed.
func (sd *shutdown) stopAndDrain(events <-chan []replication.Event) {
	sd.stopReading()
	for range events {
	}
	select {
	case <-sd.drained:
	case <-time.After(sd.timeout):
	}
}

func (sd *shutdown) close() {
	for _, f := range sd.release {
		f()
	}
	for _, f := range sd.cancels {
		f()
	}
}

// ErrDrainCut is returned by Run when relay.shutdown_timeout ended the
// drain after its context ended: the relay stopped as asked, with
// deliveries in flight that the next run sends again (`cdc run` exits 3,
// docs/design.md "Shutdown").
var ErrDrainCut = errors.New("relay: relay.shutdown_timeout cut the drain")

// runSink runs one sink's runner until its channel is drained, and names
// what went wrong: a drain cut short by relay.shutdown_timeout, or the
// sink's own error.
func (r *Relay) runSink(ctx, gctx context.Context, sd *shutdown, runner *publish.Runner, name string, window *pipeline.Window) error {
	err := runner.Run(sd.sinks)
	switch {
	case err == nil:
		return nil
	case sd.sinks.Err() != nil && gctx.Err() == nil && ctx.Err() != nil:
		n, _ := window.InFlight()
		return fmt.Errorf("%w: sink %s had not drained after %v; nothing is lost, the slot is confirmed up to what every sink acknowledged: %d deliveries in flight will be sent again after restart",
			ErrDrainCut, name, sd.timeout, n)
	}
	return fmt.Errorf("sink %s: %w", name, err)
}

// setFailing records whether sink's last attempt failed, and with what
// (lastErr, redacted; "" keeps the one recorded).
func (r *Relay) setFailing(sink string, failing bool, lastErr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !failing {
		delete(r.failing, sink)
		return
	}
	if r.failing == nil {
		r.failing = map[string]string{}
	}
	if lastErr != "" || r.failing[sink] == "" {
		r.failing[sink] = lastErr
	}
}

// logDrain logs, when SIGINT/SIGTERM ends the run's context, what the
// drain waits for and how long: the deliveries in flight, the sinks that
// are failing, and relay.shutdown_timeout, after which cdc run exits 3
// (docs/design.md, "Shutdown"). Without it a failing sink made the
// shutdown a silence of shutdown_timeout.
func (r *Relay) logDrain(window *pipeline.Window) {
	n, bytes := window.InFlight()
	r.mu.Lock()
	failing := make([]string, 0, len(r.failing))
	for name, last := range r.failing {
		if last != "" {
			name += " (" + last + ")"
		}
		failing = append(failing, name)
	}
	r.mu.Unlock()
	slices.Sort(failing)
	ev := r.log.Info()
	msg := "stopping: nothing in flight; confirming and exiting"
	if n > 0 {
		msg = fmt.Sprintf("stopping: waiting up to relay.shutdown_timeout (%v) for the sinks to acknowledge %d deliveries in flight; "+
			"if they do not, cdc run exits 3 and the next run sends them again (nothing is lost)", r.cfg.Relay.ShutdownTimeout.D(), n)
	}
	if len(failing) > 0 {
		ev = r.log.Warn().Strs("failing", failing)
		msg += "; failing now: " + strings.Join(failing, ", ")
	}
	ev.Int("in_flight", n).Int64("in_flight_bytes", bytes).Dur("shutdown_timeout_ms", r.cfg.Relay.ShutdownTimeout.D()).Msg(msg)
}
