package publish

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
)

// Factory prepares a sink of one kind from its configuration: it decodes
// the kind's own settings with cfg.Decode (strict: unknown keys are
// errors), validates them, naming the offending field in errors, and
// returns the Opener that opens the sink. A Factory does no I/O that a
// second relay could notice: no file is created, opened or repaired, no
// connection made. A standby relay that waits for the slot calls it at
// start (so that a configuration error shows at once); the relay calls the
// Opener only once it holds the slot, and again each time it takes the
// slot back. log already carries the sink's name.
type Factory func(cfg *config.Sink, log zerolog.Logger) (Opener, error)

// Opener opens a configured sink. Each call returns a new Sink, which the
// caller closes. It may do I/O (open a file, build a client) and returns
// promptly when ctx ends.
type Opener func(ctx context.Context) (Sink, error)

var (
	regMu      sync.Mutex
	factories  = map[string]Factory{}
	claimCheck ClaimCheckWrapper
	// schedulers are the kinds that may honour Message.DeliverAt
	// (RegisterScheduling).
	schedulers = map[string]string{}
)

// RegisterScheduling marks kind as able to hold a message back until its
// DeliverAt with the broker's own feature (named by how, for errors):
// its factory checks what that needs when cfg.DeliverAt is set, and its
// sinks implement Scheduler. Prepare refuses columns.deliver_at for
// every other kind, naming the sink and the property.
func RegisterScheduling(kind, how string) {
	regMu.Lock()
	defer regMu.Unlock()
	schedulers[kind] = how
}

// SchedulingKinds lists the kinds that may honour deliver_at, with how,
// for errors: "servicebus (ScheduledEnqueueTime), …".
func SchedulingKinds() string {
	regMu.Lock()
	defer regMu.Unlock()
	var out []string
	for k, how := range schedulers {
		out = append(out, k+" ("+how+")")
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// ClaimCheckWrapper wraps the Opener of a sink whose configuration has a
// claim check (cfg.ClaimCheck, relay.claim_check or the sink's own): the
// sinks it opens store payloads too large for the sink first and send a
// reference instead (publish/claimcheck). Like a Factory it validates
// without I/O, and its errors name the field.
type ClaimCheckWrapper func(cfg *config.Sink, open Opener, log zerolog.Logger) (Opener, error)

// RegisterClaimCheck makes w the wrapper Prepare applies to sinks with a
// claim check. publish/claimcheck calls it from init; cmd/cdc imports it.
func RegisterClaimCheck(w ClaimCheckWrapper) {
	regMu.Lock()
	defer regMu.Unlock()
	if claimCheck != nil {
		panic("publish: claim check registered twice")
	}
	claimCheck = w
}

// Limited is an optional ability of a Sink: it states the largest message
// it sends (its max_message_bytes setting), which a claim check takes
// for its threshold.
type Limited interface {
	// MaxMessageBytes returns the largest message the sink sends, in
	// bytes, as the broker counts it (payload, headers and framing).
	MaxMessageBytes() int
}

// ClaimCheckMetrics are the counters of a sink's claim check; a nil one
// counts nothing. Each is safe for concurrent use (a prometheus.Counter
// is one).
type ClaimCheckMetrics struct {
	Uploads        interface{ Inc() }        // payloads stored
	UploadBytes    interface{ Add(float64) } // bytes of the payloads stored
	UploadFailures interface{ Inc() }        // uploads that failed (each retried)
}

// ClaimChecked is implemented by a sink with a claim check in front
// (ClaimCheckWrapper's sinks): the relay hands it its counters before
// the first Publish.
type ClaimChecked interface {
	SetClaimCheckMetrics(ClaimCheckMetrics)
}

// Register makes a sink kind available to Prepare. Sink packages call it
// from init; cmd/cdc imports them.
func Register(kind string, f Factory) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := factories[kind]; dup {
		panic("publish: sink kind registered twice: " + kind)
	}
	factories[kind] = f
	checkOnce.Do(func() { config.RegisterSinkCheck(Check) })
}

// checkOnce registers Check with config at the first kind registered (a
// program without kinds, such as a test of the config alone, checks none).
var checkOnce sync.Once

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

// Prepare validates the sink configured as sinks[index] and returns its
// Opener (see Factory). It does no I/O.
func Prepare(index int, cfg *config.Sink, log zerolog.Logger) (Opener, error) {
	setRowHeaderLog(log)
	return prepare(index, cfg, log)
}

// Check validates the sink configured as sinks[index] as Prepare does,
// logging nothing. Once a kind is registered, config.Parse runs it
// (config.RegisterSinkCheck) so that a sink's mistakes are reported with
// the file's others, in one run.
func Check(index int, cfg *config.Sink) error {
	_, err := prepare(index, cfg, zerolog.Nop())
	return err
}

func prepare(index int, cfg *config.Sink, log zerolog.Logger) (Opener, error) {
	regMu.Lock()
	f, ok := factories[cfg.Kind]
	if !ok {
		regMu.Unlock()
		return nil, &config.Error{Field: fmt.Sprintf("sinks[%d].kind", index), Line: cfg.LineOf("kind"),
			Msg: fmt.Sprintf("unknown kind %q (one of %s)", cfg.Kind, strings.Join(Kinds(), ", "))}
	}
	_, schedules := schedulers[cfg.Kind]
	regMu.Unlock()
	if cfg.DeliverAt && !schedules {
		return nil, &config.Error{Field: fmt.Sprintf("sinks[%d].kind", index), Line: cfg.LineOf("kind"),
			Msg: fmt.Sprintf("sink %s: columns.deliver_at is mapped, but a %s sink cannot hold a message back until its deliver_at "+
				"(the broker has no scheduled delivery), and walpost never sends a message early: remove columns.deliver_at, "+
				"or send such messages through a sink that can: %s", cfg.Name, cfg.Kind, SchedulingKinds())}
	}
	slog := log.With().Str("sink", cfg.Name).Logger()
	open, err := f(cfg, slog)
	if err != nil {
		return nil, cfg.WrapError(index, err)
	}
	if cfg.ClaimCheck != nil {
		regMu.Lock()
		wrap := claimCheck
		regMu.Unlock()
		if wrap == nil {
			return nil, fmt.Errorf("%s: this build has no claim check (import internal/publish/claimcheck)", cfg.ClaimCheck.Field)
		}
		if open, err = wrap(cfg, open, slog); err != nil {
			return nil, err
		}
	}
	return func(ctx context.Context) (Sink, error) {
		s, err := open(ctx)
		if err != nil {
			return nil, fmt.Errorf("sink %s: %w", cfg.Name, err)
		}
		return s, nil
	}, nil
}

// Open prepares and opens the sink configured as sinks[index]: Prepare,
// then its Opener.
func Open(ctx context.Context, index int, cfg *config.Sink, log zerolog.Logger) (Sink, error) {
	open, err := Prepare(index, cfg, log)
	if err != nil {
		return nil, err
	}
	return open(ctx)
}

// FactoryOf makes a Factory of a constructor that does no I/O (it builds
// clients, but connects only at the first Publish): Prepare runs it once
// to validate the settings and closes what it built; each Opener call runs
// it again.
func FactoryOf(newSink func(cfg *config.Sink, log zerolog.Logger) (Sink, error)) Factory {
	return func(cfg *config.Sink, log zerolog.Logger) (Opener, error) {
		s, err := newSink(cfg, zerolog.Nop())
		if err != nil {
			return nil, err
		}
		if err := s.Close(); err != nil {
			return nil, err
		}
		return func(context.Context) (Sink, error) { return newSink(cfg, log) }, nil
	}
}

// Settings are a sink kind's own settings, decoded from its config entry.
type Settings interface {
	// SetDefaults fills in the fields left unset.
	SetDefaults()
	// Validate checks every field and names the first bad one ("brokers:
	// empty"); Prepare prefixes the sink.
	Validate() error
}

// DecodeSettings decodes cfg's kind-specific settings into s strictly (an
// unknown key is an error), fills in their defaults and validates them.
func DecodeSettings(cfg *config.Sink, s Settings) error {
	if err := cfg.Decode(s); err != nil {
		return err
	}
	s.SetDefaults()
	return s.Validate()
}
