package replay

import (
	"context"
	"fmt"
	"strings"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
)

// sinks are the configured sinks a command publishes to, opened on first
// use and closed together.
type sinks struct {
	cfg   *config.Config
	only  int // the one sink to use (--sink), or -1 for all
	log   zerolog.Logger
	open  []publish.Sink // by index in cfg.Sinks; nil until opened
	order []int          // the indexes opened, in order
	// lent, when set, returns a running relay's sinks (publish.Lent),
	// used instead of opening them; nil entries are opened.
	lent func() []publish.Sink
}

// newSinks returns cfg's sinks, or only the one named only when it is not
// "" (an error when the configuration has no such sink).
func newSinks(cfg *config.Config, only string, log zerolog.Logger) (*sinks, error) {
	s := &sinks{cfg: cfg, only: -1, log: log, open: make([]publish.Sink, len(cfg.Sinks))}
	if only != "" {
		s.only = s.index(only)
		if s.only < 0 {
			return nil, fmt.Errorf("--sink %s: the configuration has no such sink (its sinks: %s)", only, strings.Join(s.names(), ", "))
		}
	}
	return s, nil
}

func (s *sinks) names() []string {
	names := make([]string, len(s.cfg.Sinks))
	for i := range s.cfg.Sinks {
		names[i] = s.cfg.Sinks[i].Name
	}
	return names
}

// index returns the index of the sink called name, or -1.
func (s *sinks) index(name string) int {
	for i := range s.cfg.Sinks {
		if s.cfg.Sinks[i].Name == name {
			return i
		}
	}
	return -1
}

// used returns the indexes of the sinks in use: all, or the --sink one.
func (s *sinks) used() []int {
	if s.only >= 0 {
		return []int{s.only}
	}
	all := make([]int, len(s.cfg.Sinks))
	for i := range all {
		all[i] = i
	}
	return all
}

// routes returns the sinks in use whose route takes m, as the relay's
// pipeline routes it.
func (s *sinks) routes(m *message.Message) []int {
	var out []int
	for _, i := range s.used() {
		if s.cfg.Sinks[i].Route.Matches(m.Type) {
			out = append(out, i)
		}
	}
	return out
}

// get returns sink i, opening it first if needed. A file sink that a
// running relay holds waits for its lock until ctx ends (logged once).
func (s *sinks) get(ctx context.Context, i int) (publish.Sink, error) {
	if s.open[i] != nil {
		return s.open[i], nil
	}
	if s.lent != nil {
		if lent := s.lent(); i < len(lent) && lent[i] != nil {
			return lent[i], nil // the relay's own, not closed here
		}
	}
	sink, err := publish.Open(ctx, i, &s.cfg.Sinks[i], s.log)
	if err != nil {
		return nil, err
	}
	s.open[i] = sink
	s.order = append(s.order, i)
	return sink, nil
}

// close closes the sinks opened, in reverse order.
func (s *sinks) close() {
	for j := len(s.order) - 1; j >= 0; j-- {
		i := s.order[j]
		if err := s.open[i].Close(); err != nil {
			s.log.Warn().Err(err).Str("sink", s.cfg.Sinks[i].Name).Msg("closing the sink")
		}
		s.open[i] = nil
	}
	s.order = nil
}
