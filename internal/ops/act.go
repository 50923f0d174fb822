package ops

import (
	"context"
	"errors"
	"fmt"

	"github.com/walpost/walpost/internal/replay"
	"github.com/walpost/walpost/internal/store"
)

// Kind is what an Action does.
type Kind string

const (
	// Resend publishes the rows again and marks each delivered one
	// resent; a row of a held key releases its key, in order, from its
	// head (which must be the row or selected with it).
	Resend Kind = "resend"
	// Drop deletes the rows; dropping a held key's head resends the key's
	// other parked messages in order and releases it.
	Drop Kind = "drop"
	// Release resends a held key's parked messages in order from its
	// head, found by a keyed query: Action.Sink and Action.Key.
	Release Kind = "release"
)

// Action is what Act does, and to which rows: those Select names (Resend,
// Drop), the messages not resent of Group (a Group.ID; Resend, Drop), or
// the held key (Sink, Key) (Release; Sink "" or "-" for a key held for
// every sink).
type Action struct {
	Kind   Kind
	Select Filter
	Group  string
	Sink   string
	Key    string
}

// Outcome is what an action did with one parked row.
type Outcome struct {
	Ref  string  `json:"ref"`
	ID   *string `json:"id"`
	At   string  `json:"at"`
	Sink string  `json:"sink"` // the row's sink; "" parked for every sink
	// Result is resent, dropped or failed.
	Result string   `json:"result"`
	Sinks  []string `json:"sinks,omitempty"` // resent to (or tried)
	Error  string   `json:"error,omitempty"`
}

// Name is how commands name the row: its id, or its position.
func (o *Outcome) Name() string {
	if o.ID != nil {
		return *o.ID
	}
	return o.At
}

// Result is what an action did: every row's Outcome, how many failed, and
// the held keys it released ("SINK|KEY", SINK "-" for every sink).
type Result struct {
	Action   Kind      `json:"action"`
	Selected int       `json:"selected"`
	Outcomes []Outcome `json:"outcomes"`
	Failed   int       `json:"failed"`
	Released []string  `json:"released"`
}

// Refs are the refs of the rows the action did something with, or tried
// (Outcome.Ref), in its order: what a log line names.
func (r *Result) Refs() []string {
	s := make([]string, len(r.Outcomes))
	for i, o := range r.Outcomes {
		s[i] = o.Ref
	}
	return s
}

// ErrBadAction is wrapped by the errors for an action that names nothing
// it can do (no such group, a key that is not held); nothing was done.
var ErrBadAction = errors.New("ops: bad action")

// Act does a on the rows it names, after the Room's checks (ready),
// through internal/replay on the Room's connection; report (nil: none)
// gets each Outcome as it happens. Rows of Select.Refs or Group that are
// gone are an error before anything is done; ids of Select.IDs that name
// nothing are a NotFoundError after the others were done. A row that
// fails is an Outcome; the error is for what stops the action.
func (r *Room) Act(ctx context.Context, a Action, report func(Outcome)) (Result, error) {
	res := Result{Action: a.Kind, Outcomes: []Outcome{}, Released: []string{}}
	rows, missing, err := r.selection(ctx, a)
	if err != nil {
		return res, err
	}
	res.Selected = len(rows)
	add := func(o Outcome) {
		res.Outcomes = append(res.Outcomes, o)
		if report != nil {
			report(o)
		}
	}
	x := r.resender()
	defer x.Close()
	switch a.Kind {
	case Resend, Release:
		failed, err := x.Resend(ctx, rows, func(o replay.Outcome) { add(r.outcome(o)) })
		res.Failed = failed
		if err != nil {
			return res, err
		}
		if a.Kind == Release && failed == 0 {
			res.Released = append(res.Released, SinkLabel(rows[0].Sink)+"|"+rows[0].HoldKey)
		}
	case Drop:
		for i := range rows {
			if err := r.drop(ctx, x, &rows[i], &res, add); err != nil {
				return res, err
			}
		}
	}
	return res, missing
}

// drop drops p; p the head of a held key, the key's other parked
// messages are resent in order (replay.Resender.Release).
func (r *Room) drop(ctx context.Context, x *replay.Resender, p *store.Parked, res *Result, add func(Outcome)) error {
	dropped := Outcome{Ref: refOf(p), At: p.At(), Sink: p.Sink, Result: "dropped"}
	if p.ID != "" {
		dropped.ID = ptr(p.ID)
	}
	if !p.Held() {
		ok, err := store.DropParked(ctx, r.conns.State, r.t, p)
		if ok {
			add(dropped)
		}
		return err
	}
	isHead := true
	failed, err := x.Release(ctx, *p, func(o replay.Outcome) {
		if o.Parked.LSN == p.LSN && o.Parked.Seq == p.Seq && o.Parked.Sink == p.Sink {
			isHead = false // not the head: the outcome says which is
		}
		add(r.outcome(o))
	})
	res.Failed += failed
	if err != nil {
		return err
	}
	if isHead {
		add(dropped)
		if failed == 0 {
			res.Released = append(res.Released, SinkLabel(p.Sink)+"|"+p.HoldKey)
		}
	}
	return nil
}

// outcome is o as the view shows it.
func (r *Room) outcome(o replay.Outcome) Outcome {
	out := Outcome{Ref: refOf(&o.Parked), At: o.Parked.At(), Sink: o.Parked.Sink, Result: "resent", Sinks: o.Sinks}
	if o.Parked.ID != "" {
		out.ID = ptr(o.Parked.ID)
	}
	if o.Err != nil {
		out.Result, out.Error = "failed", r.redact(o.Err.Error())
	}
	return out
}

// selection returns the rows a names, and a NotFoundError for ids of
// a.Select.IDs that name none (the others are acted on).
func (r *Room) selection(ctx context.Context, a Action) (rows []store.Parked, missing error, err error) {
	if err := r.ready(ctx); err != nil {
		return nil, nil, err
	}
	switch {
	case a.Kind == Release:
		if a.Key == "" || a.Group != "" || len(a.Select.IDs)+len(a.Select.Refs) > 0 {
			return nil, nil, fmt.Errorf("%w: release takes a held key: {\"sink\": SINK, \"key\": KEY} (sink \"\" or \"-\" for a key held for every sink)", ErrBadAction)
		}
		sink := a.Sink
		if sink == "-" {
			sink = ""
		}
		head, ok, err := store.KeyHead(ctx, r.conns.State, r.t, sink, a.Key)
		if err != nil || !ok {
			return nil, nil, cmpErr(err, fmt.Errorf("%w: key %q of sink %s is not held", ErrBadAction, a.Key, SinkLabel(sink)))
		}
		return []store.Parked{head}, nil, nil
	case a.Kind != Resend && a.Kind != Drop:
		return nil, nil, fmt.Errorf("%w: no action %q: resend, drop or release", ErrBadAction, a.Kind)
	case a.Group != "":
		if len(a.Select.IDs)+len(a.Select.Refs) > 0 {
			return nil, nil, fmt.Errorf("%w: give messages or a group, one or the other", ErrBadAction)
		}
		return r.group(ctx, a.Group)
	}
	rows, err = r.parked(ctx, a.Select)
	var nf *NotFoundError
	switch {
	case errors.As(err, &nf) && len(a.Select.Refs) > 0:
		return nil, nil, fmt.Errorf("%w: %w (reload: it may be resent or dropped)", ErrBadAction, err)
	case nf != nil:
		return rows, err, nil
	}
	return rows, nil, err
}

// group returns the rows not resent of the failure group id (Groups).
func (r *Room) group(ctx context.Context, id string) ([]store.Parked, error, error) {
	unsent, err := r.Parked(ctx, Filter{Unsent: true})
	if err != nil {
		return nil, nil, err
	}
	var rows []store.Parked
	for _, g := range Groups(unsent) {
		if g.ID == id {
			for _, m := range g.Messages {
				rows = append(rows, m.p)
			}
		}
	}
	if len(rows) == 0 {
		return nil, nil, fmt.Errorf("%w: no group %s (reload: its messages may be resent or dropped)", ErrBadAction, id)
	}
	return rows, nil, nil
}

// cmpErr is err when it is set, else why.
func cmpErr(err, why error) error {
	if err != nil {
		return err
	}
	return why
}
