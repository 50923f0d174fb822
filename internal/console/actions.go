package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/walpost/walpost/internal/ops"
	"github.com/walpost/walpost/internal/tracing"
)

// ActionRequest is the body of POST /api/v1/sources/NAME/ACTION: the
// parked messages by Ref (ops.Message.Ref), or a Group's ID (its
// messages not resent); release takes a held key: Sink ("" or "-" for a
// key held for every sink) and Key.
type ActionRequest struct {
	Messages []string `json:"messages,omitempty"`
	Group    string   `json:"group,omitempty"`
	Sink     string   `json:"sink,omitempty"`
	Key      string   `json:"key,omitempty"`
}

// ActionResult is the answer to an action (ops.Result): 200 when every
// message was done, 422 when some failed (each says why).
type ActionResult struct {
	Source string `json:"source"`
	ops.Result
}

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
	action := ops.Kind(r.PathValue("action"))
	if action != ops.Resend && action != ops.Drop && action != ops.Release {
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
	ctx = tracing.WithProvider(ctx, src.Tracing) // a resend's publish spans
	res, err := c.act(ctx, src, action, req)
	ev := c.log.Info()
	if err != nil || res.Failed > 0 {
		ev = c.log.Warn()
	}
	ev = ev.Str("source", src.Name).Str("slot", src.Config.Postgres.Slot).Str("action", string(action)).Str("role", roleOf(r).String()).
		Str("remote", r.RemoteAddr).Strs("messages", res.Refs()).Int("failed", res.Failed).Strs("released", res.Released)
	if err != nil {
		ev.Str("error", c.redact(err.Error())).Msg("console: " + string(action) + " refused")
		code := http.StatusInternalServerError
		if errors.Is(err, ops.ErrBadAction) {
			code = http.StatusBadRequest
		}
		writeError(w, code, c.redact(err.Error()))
		return
	}
	ev.Msg("console: " + string(action))
	code := http.StatusOK
	if res.Failed > 0 {
		code = http.StatusUnprocessableEntity
	}
	writeJSON(w, code, res)
}

// act does action on src's parked messages that req names, through one
// ops.Room, as cdc dead-letter does: the rules are the same.
func (c *Console) act(ctx context.Context, src *source, action ops.Kind, req ActionRequest) (ActionResult, error) {
	res := ActionResult{Source: src.Name, Result: ops.Result{Action: action, Outcomes: []ops.Outcome{}, Released: []string{}}}
	if action != ops.Release && (len(req.Messages) == 0) == (req.Group == "") {
		return res, fmt.Errorf("%w: give messages (their refs) or a group, one or the other", ops.ErrBadAction)
	}
	room, err := ops.Open(ctx, src.Config, ops.Options{Log: c.log, Redact: c.redact, Sinks: src.Sinks})
	if err != nil {
		return res, err
	}
	defer room.Close()
	res.Result, err = room.Act(ctx, ops.Action{Kind: action, Select: ops.Filter{Refs: req.Messages}, Group: req.Group, Sink: req.Sink, Key: req.Key}, nil)
	return res, err
}
