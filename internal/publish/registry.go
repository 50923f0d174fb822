package publish

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
)

// Factory opens a sink of one kind from its configuration. It decodes the
// kind's own settings with cfg.Decode (strict: unknown keys are errors) and
// names the offending field in errors. log already carries the sink's name.
type Factory func(cfg *config.Sink, log zerolog.Logger) (Sink, error)

var (
	regMu     sync.Mutex
	factories = map[string]Factory{}
)

// Register makes a sink kind available to Open. Sink packages call it from
// init; cmd/cdc imports them.
func Register(kind string, f Factory) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := factories[kind]; dup {
		panic("publish: sink kind registered twice: " + kind)
	}
	factories[kind] = f
	config.RegisterKind(kind)
}

// Kinds lists the registered sink kinds, sorted.
func Kinds() []string {
	regMu.Lock()
	defer regMu.Unlock()
	ks := make([]string, 0, len(factories))
	for k := range factories {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Open opens the sink configured as sinks[index].
func Open(index int, cfg *config.Sink, log zerolog.Logger) (Sink, error) {
	regMu.Lock()
	f, ok := factories[cfg.Kind]
	regMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("sinks[%d].kind: unknown kind %q (one of %s)", index, cfg.Kind, strings.Join(Kinds(), ", "))
	}
	s, err := f(cfg, log.With().Str("sink", cfg.Name).Logger())
	if err != nil {
		return nil, fmt.Errorf("sinks[%d] (%s): %w", index, cfg.Name, err)
	}
	return s, nil
}
