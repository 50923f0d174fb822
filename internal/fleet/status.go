package fleet

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/walpost/walpost/internal/relay"
)

// The states of a source, as /sources and /readyz?verbose name them.
const (
	// StateConnecting: checking its server, or waiting to reach it; not
	// (or no longer) trying its slot.
	StateConnecting = "connecting"
	// StateStandby: another process holds its slot; tried again every
	// postgres.standby_poll. It holds no capacity meanwhile.
	StateStandby = "standby"
	// StateWaitingForCapacity: this instance holds --max-active slots;
	// the source does not try its slot until a place is free.
	StateWaitingForCapacity = "waiting_for_capacity"
	// StateAcquiring: it holds a place: trying its slot, reading the
	// slot's state and opening its sinks, or reconnecting while it holds
	// the slot.
	StateAcquiring = "acquiring"
	// StateStreaming: this instance holds its slot and streams.
	StateStreaming = "streaming"
	// StateFailed: its relay stopped with an error; started again at
	// RetryAt.
	StateFailed = "failed"
	// StateStopped: the process is stopping and the source stopped.
	StateStopped = "stopped"
)

// stateOrder is the order /readyz counts states in.
var stateOrder = []string{StateStreaming, StateAcquiring, StateStandby, StateWaitingForCapacity, StateConnecting, StateFailed, StateStopped}

// Status is what the instance knows of one of its sources.
type Status struct {
	Name   string `json:"name"`
	Config string `json:"config"`
	Slot   string `json:"slot"`
	State  string `json:"state"`
	// Unowned: waiting for capacity, and its slot was last found held by
	// no process: nothing relays it.
	Unowned bool `json:"unowned"`
	// Failures counts the times its relay stopped with an error.
	Failures int `json:"failures"`
	// Error is the last failure's, while failed.
	Error   *string    `json:"error"`
	RetryAt *time.Time `json:"retry_at"`
	// FailingSinks are the sinks retrying a batch they failed to publish
	// (walpost_sink_failing).
	FailingSinks []string `json:"failing_sinks"`
	// reached: it got past its first check (tried its slot) or failed.
	reached bool
}

// Report is /sources: the instance and each of its sources.
type Report struct {
	Ready        bool     `json:"ready"`
	Why          string   `json:"why"` // what /readyz answers
	MaxActive    int      `json:"max_active"`
	CapacityUsed int      `json:"capacity_used"`
	Sources      []Status `json:"sources"`
}

// StateOf returns the state of the source called name, "" when there is
// none.
func (r Report) StateOf(name string) string {
	for _, s := range r.Sources {
		if s.Name == name {
			return s.State
		}
	}
	return ""
}

// Report returns the state of every source, in the order of their files.
func (f *Fleet) Report() Report {
	failing := f.failingSinks()
	r := Report{MaxActive: f.gate.Max(), CapacityUsed: f.gate.Used(), Sources: []Status{}}
	for _, s := range f.sources {
		st := s.status(time.Now())
		st.FailingSinks = failing[s.Name]
		if st.FailingSinks == nil {
			st.FailingSinks = []string{}
		}
		if st.Error != nil {
			e := f.opt.Redact(*st.Error)
			st.Error = &e
		}
		r.Sources = append(r.Sources, st)
	}
	r.Ready, r.Why = f.readiness(r.Sources)
	return r
}

// status derives the source's state from its supervisor, its relay and
// its entry of the Gate.
func (s *source) status(now time.Time) Status {
	s.mu.Lock()
	st := Status{Name: s.Name, Config: s.Path, Slot: s.Config.Postgres.Slot, Failures: s.nfailed}
	failed, stopped, r := s.failed, s.stopped, s.relay
	if failed {
		msg := s.err.Error()
		at := s.retryAt
		st.Error, st.RetryAt = &msg, &at
	}
	s.mu.Unlock()
	e := s.entry.snapshot()
	st.reached = e.reached || failed
	// A standby waits for its slot (WaitFree), then tries it, within
	// about standby_poll (±25%, plus the spread, at most half of it); one
	// that has not for much longer is back at its check.
	stale := 3*s.entry.poll + 2*time.Second
	switch {
	case stopped:
		st.State = StateStopped
	case failed:
		st.State = StateFailed
	case r.Ready():
		st.State = StateStreaming
	case e.waiting:
		st.State, st.Unowned = StateWaitingForCapacity, e.unowned
	case e.held:
		st.State = StateAcquiring
	case e.attempts > 0 && (e.standby || now.Sub(e.lastEnter) < stale):
		st.State = StateStandby
	default:
		st.State = StateConnecting
	}
	return st
}

// readiness is /readyz of a process of several sources: ready once every
// source got past its first check (it streams, waits for its slot or for
// capacity, or failed) or StartGrace passed since the start, unless every
// source failed or the process is stopping. A failing source does not
// make the instance unready: it is one source's trouble, shown by
// /readyz?verbose, /sources and walpost_source_failed, and an unready
// instance would hold up a rollout that may be what repairs it.
func (f *Fleet) readiness(sources []Status) (bool, string) {
	if f.stopping.Load() {
		return false, "stopping"
	}
	started := f.started.Load()
	if started == 0 {
		return false, "not started"
	}
	failed, starting := 0, 0
	counts := map[string]int{}
	for _, s := range sources {
		counts[s.State]++
		if s.State == StateFailed {
			failed++
		}
		if !s.reached && s.State != StateStreaming {
			starting++
		}
	}
	if failed == len(sources) {
		return false, fmt.Sprintf("every source failed (%d)", failed)
	}
	if starting > 0 && time.Since(time.Unix(0, started)) < f.opt.StartGrace {
		return false, fmt.Sprintf("starting: %d of %d sources not yet at their slot", starting, len(sources))
	}
	var parts []string
	for _, state := range stateOrder {
		if n := counts[state]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, state))
		}
	}
	return true, "ok: " + strings.Join(parts, ", ")
}

// Ready reports whether /readyz answers 200 (see readiness).
func (f *Fleet) Ready() bool { return f.Report().Ready }

// ServeReadyz serves /readyz: 200 "ok: …" with the sources counted by
// state, or 503 and why; with ?verbose, one line per source follows:
// its name and state (and "unowned", "failing sinks: …"). It shows no
// error text: probes carry no credentials.
func (f *Fleet) ServeReadyz(w http.ResponseWriter, req *http.Request) {
	rep := f.Report()
	var b strings.Builder
	b.WriteString(rep.Why + "\n")
	if _, verbose := req.URL.Query()["verbose"]; verbose {
		for _, s := range rep.Sources {
			fmt.Fprintf(&b, "%s %s", s.Name, s.State)
			if s.Unowned {
				b.WriteString(" unowned")
			}
			if len(s.FailingSinks) > 0 {
				fmt.Fprintf(&b, " failing_sinks=%s", strings.Join(s.FailingSinks, ","))
			}
			b.WriteString("\n")
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if !rep.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	fmt.Fprint(w, b.String())
}

// SourcesHandler serves /sources: the Report as JSON.
func (f *Fleet) SourcesHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(f.Report())
	})
}

// failingSinks reads walpost_sink_failing from the registry: by source,
// the sinks at 1.
func (f *Fleet) failingSinks() map[string][]string {
	out := map[string][]string{}
	if f.opt.Registry == nil {
		return out
	}
	for _, s := range relay.Gathered(f.opt.Registry) {
		if s.Name == "walpost_sink_failing" && s.Value == 1 {
			out[s.Labels["source"]] = append(out[s.Labels["source"]], s.Labels["sink"])
		}
	}
	for k := range out {
		slices.Sort(out[k])
	}
	return out
}
