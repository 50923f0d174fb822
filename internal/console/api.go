package console

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/walpost/walpost/internal/ops"
)

// readTimeout bounds the reads of a page or an API answer.
const readTimeout = 20 * time.Second

// Session is /api/v1/session: the caller's role and, for the operate
// role only, the CSRF token every action sends in X-CSRF-Token (absent
// for the view role, which acts on nothing).
type Session struct {
	Role      string `json:"role"`
	CSRFToken string `json:"csrf_token,omitempty"`
}

func (c *Console) serveSession(w http.ResponseWriter, r *http.Request) {
	s := Session{Role: roleOf(r).String()}
	if roleOf(r) == RoleOperate {
		s.CSRFToken = c.csrf
	}
	writeJSON(w, http.StatusOK, s)
}

// Sources is /api/v1/sources.
type Sources struct {
	Role    string       `json:"role"`
	Sources []SourceView `json:"sources"`
}

func (c *Console) serveSources(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	out := Sources{Role: roleOf(r).String(), Sources: eachSource(c.sources, func(s *source) SourceView { return c.detail(ctx, s, false).SourceView })}
	writeJSON(w, http.StatusOK, out)
}

func (c *Console) serveSource(w http.ResponseWriter, r *http.Request) {
	src := c.sourceNamed(r.PathValue("source"))
	if src == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no source %q", r.PathValue("source")))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	writeJSON(w, http.StatusOK, c.detail(ctx, src, true))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	ops.WriteJSON(w, v)
}

// writeError answers {"error": msg}.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// readers is how many sources a page or an answer reads at once.
const readers = 4

// eachSource returns f of every source, in their order, running up to
// readers of them at once.
func eachSource[T any](sources []*source, f func(*source) T) []T {
	out := make([]T, len(sources))
	var g errgroup.Group
	g.SetLimit(readers)
	for i, s := range sources {
		g.Go(func() error {
			out[i] = f(s)
			return nil
		})
	}
	g.Wait()
	return out
}
