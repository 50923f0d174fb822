package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/walpost/walpost/internal/admin"
	"github.com/walpost/walpost/internal/replay"
	"github.com/walpost/walpost/internal/store"
	"github.com/walpost/walpost/internal/tracing"
)

// ActionRequest is the body of POST /api/v1/sources/NAME/ACTION: the
// parked messages by Ref (MessageView.Ref), or a Group's ID (its
// messages not resent); release takes a held key: Sink ("" for a key
// held for every sink) and Key.
type ActionRequest struct {
	Messages []string `json:"messages,omitempty"`
	Group    string   `json:"group,omitempty"`
	Sink     string   `json:"sink,omitempty"`
	Key      string   `json:"key,omitempty"`
}

// OutcomeView is what an action did with one parked message.
type OutcomeView struct {
	Ref string  `json:"ref"`
	ID  *string `json:"id"`
	At  string  `json:"at"`
	// Result is resent, dropped or failed.
	Result string   `json:"result"`
	Sinks  []string `json:"sinks,omitempty"` // resent to
	Error  string   `json:"error,omitempty"`
}

// ActionResult is the answer to an action: 200 when every message was
// done, 422 when some failed (each says why).
type ActionResult struct {
	Source   string        `json:"source"`
	Action   string        `json:"action"`
	Outcomes []OutcomeView `json:"outcomes"`
	Failed   int           `json:"failed"`
	// Released are the held keys the action released ("SINK|KEY").
	Released []string `json:"released"`
}

// errBadRequest marks an action request that names nothing it can do.
var errBadRequest = errors.New("console: bad request")

// actionTimeout bounds an action: resends retry a failing sink a few
// times.
const actionTimeout = 5 * time.Minute

func (c *Console) serveAction(w http.ResponseWriter, r *http.Request) {
	if why, code := c.checkPOST(r); why != "" {
		writeError(w, code, why)
		return
	}
	src := c.sourceNamed(r.PathValue("source"))
	if src == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no source %q", r.PathValue("source")))
		return
	}
	action := r.PathValue("action")
	if action != "resend" && action != "drop" && action != "release" {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no action %q: resend, drop or release", action))
		return
	}
	var req ActionRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "reading the request: "+err.Error())
		return
	}
	c.acting.Lock()
	defer c.acting.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), actionTimeout)
	defer cancel()
	ctx = tracing.WithProvider(ctx, c.tracing) // a resend's publish spans
	res, err := c.act(ctx, src, action, req)
	ev := c.log.Info()
	if err != nil || res.Failed > 0 {
		ev = c.log.Warn()
	}
	ev = ev.Str("source", src.name).Str("slot", src.cfg.Postgres.Slot).Str("action", action).Str("role", roleOf(r).String()).
		Str("remote", r.RemoteAddr).Strs("messages", refs(res.Outcomes)).Int("failed", res.Failed).Strs("released", res.Released)
	if err != nil {
		ev.Str("error", c.redact(err.Error())).Msg("console: " + action + " refused")
		code := http.StatusInternalServerError
		if errors.Is(err, errBadRequest) {
			code = http.StatusBadRequest
		}
		writeError(w, code, c.redact(err.Error()))
		return
	}
	ev.Msg("console: " + action)
	code := http.StatusOK
	if res.Failed > 0 {
		code = http.StatusUnprocessableEntity
	}
	writeJSON(w, code, res)
}

func refs(out []OutcomeView) []string {
	s := make([]string, len(out))
	for i, o := range out {
		s[i] = o.Ref
	}
	return s
}

// act runs action on src's parked messages that req names, through
// internal/replay as cdc dead-letter does, after admin.CheckTrust.
func (c *Console) act(ctx context.Context, src *source, action string, req ActionRequest) (ActionResult, error) {
	res := ActionResult{Source: src.name, Action: action, Outcomes: []OutcomeView{}, Released: []string{}}
	if err := admin.CheckTrust(ctx, src.cfg); err != nil {
		return res, err
	}
	dl, err := replay.OpenDeadLetters(ctx, src.cfg)
	if err != nil {
		return res, err
	}
	defer dl.Close()
	all, _, err := dl.List(ctx, store.ParkedFilter{})
	if err != nil {
		return res, err
	}
	selected, err := c.selectRows(all, action, req)
	if err != nil {
		return res, err
	}
	report := func(o replay.Outcome) { res.add(c, o) }
	switch action {
	case "resend", "release":
		failed, err := replay.Resend(ctx, src.cfg, selected, c.log, report)
		res.Failed = failed
		if err != nil {
			return res, err
		}
		if action == "release" && failed == 0 {
			res.Released = append(res.Released, sinkLabel(selected[0].Sink)+"|"+selected[0].HoldKey)
		}
	case "drop":
		for i := range selected {
			p := &selected[i]
			if p.Held() {
				if err := c.dropHead(ctx, src, p, &res); err != nil {
					return res, err
				}
				continue
			}
			ok, err := dl.Drop(ctx, p)
			if err != nil {
				return res, err
			}
			if ok {
				res.Outcomes = append(res.Outcomes, OutcomeView{Ref: refOf(p), ID: idOf(p), At: p.At(), Result: "dropped"})
			}
		}
	}
	return res, nil
}

// dropHead drops p, the parked message a key is held behind, and resends
// the key's other parked messages in order (replay.Release), as cdc
// dead-letter drop does.
func (c *Console) dropHead(ctx context.Context, src *source, p *store.Parked, res *ActionResult) error {
	dropped := true
	failed, err := replay.Release(ctx, src.cfg, *p, c.log, func(o replay.Outcome) {
		if o.Parked.LSN == p.LSN && o.Parked.Seq == p.Seq && o.Parked.Sink == p.Sink {
			dropped = false // not the head: the outcome says which is
		}
		res.add(c, o)
	})
	res.Failed += failed
	if err != nil {
		return err
	}
	if dropped {
		res.Outcomes = append(res.Outcomes, OutcomeView{Ref: refOf(p), ID: idOf(p), At: p.At(), Result: "dropped"})
		if failed == 0 {
			res.Released = append(res.Released, sinkLabel(p.Sink)+"|"+p.HoldKey)
		}
	}
	return nil
}

// add records a resend's outcome.
func (res *ActionResult) add(c *Console, o replay.Outcome) {
	ov := OutcomeView{Ref: refOf(&o.Parked), ID: idOf(&o.Parked), At: o.Parked.At(), Result: "resent", Sinks: o.Sinks}
	if o.Err != nil {
		ov.Result, ov.Error = "failed", c.redact(o.Err.Error()) // counted by replay
	}
	res.Outcomes = append(res.Outcomes, ov)
}

func idOf(p *store.Parked) *string {
	if p.ID == "" {
		return nil
	}
	id := p.ID
	return &id
}

func sinkLabel(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// selectRows returns the rows of all that req names for action.
func (c *Console) selectRows(all []store.Parked, action string, req ActionRequest) ([]store.Parked, error) {
	var out []store.Parked
	switch {
	case action == "release":
		if req.Key == "" || len(req.Messages) > 0 || req.Group != "" {
			return nil, fmt.Errorf("%w: release takes a held key: {\"sink\": SINK, \"key\": KEY} (sink \"\" or \"-\" for a key held for every sink)", errBadRequest)
		}
		sink := req.Sink
		if sink == "-" {
			sink = ""
		}
		head := headOf(all, sink, req.Key)
		if head == nil {
			return nil, fmt.Errorf("%w: key %q of sink %s is not held", errBadRequest, req.Key, sinkLabel(sink))
		}
		return []store.Parked{*head}, nil
	case req.Group != "" && len(req.Messages) == 0:
		unsent := slices.DeleteFunc(slices.Clone(all), func(p store.Parked) bool { return !p.ResentAt.IsZero() })
		for _, g := range c.groups(unsent) {
			if g.ID != req.Group {
				continue
			}
			want := map[string]bool{}
			for _, m := range g.Messages {
				want[m.Ref] = true
			}
			for _, p := range unsent {
				if want[refOf(&p)] {
					out = append(out, p)
				}
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("%w: no group %s (reload: its messages may be resent or dropped)", errBadRequest, req.Group)
		}
		return out, nil
	case len(req.Messages) > 0 && req.Group == "":
		byRef := map[string]store.Parked{}
		for _, p := range all {
			byRef[refOf(&p)] = p
		}
		var missing []string
		for _, ref := range req.Messages {
			p, ok := byRef[ref]
			if !ok {
				missing = append(missing, ref)
				continue
			}
			out = append(out, p)
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("%w: no parked message %s (reload: it may be resent or dropped)", errBadRequest, strings.Join(missing, ", "))
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: give messages (their refs) or a group, one or the other", errBadRequest)
}
