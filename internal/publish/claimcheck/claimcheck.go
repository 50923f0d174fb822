package claimcheck

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/envelope"
)

// The headers of a claim-checked message (message.RelayHeaders); the same
// names as inbox.HeaderClaimCheck, inbox.HeaderClaimCheckSize and
// inbox.HeaderClaimCheckSHA256 (a test keeps them equal).
const (
	HeaderRef    = message.HeaderClaimCheck
	HeaderSize   = message.HeaderClaimSize
	HeaderSHA256 = message.HeaderClaimSHA256
)

// Headroom is what the default threshold leaves of a sink's
// max_message_bytes for the message's id, type, headers and framing.
const Headroom = 16 << 10

// Store keeps claim-checked payloads.
type Store interface {
	// Put stores body as the object name (replacing what is there) and
	// returns, once it is durable, the reference receivers fetch it by
	// (the walpost-claim-check header). It returns promptly when ctx ends.
	Put(ctx context.Context, name string, body []byte, contentType string) (ref string, err error)
}

func init() { publish.RegisterClaimCheck(Wrap) }

// Wrap is the publish.ClaimCheckWrapper: it builds the store of
// cfg.ClaimCheck (no I/O) and returns an Opener whose sinks claim-check.
func Wrap(cfg *config.Sink, open publish.Opener, log zerolog.Logger) (publish.Opener, error) {
	cc := cfg.ClaimCheck
	newStore := func() (Store, error) {
		switch cc.Store {
		case config.StoreAzblob:
			return newAzblob(cc)
		case config.StoreS3:
			return s3StoreOf(cc)
		}
		return nil, fmt.Errorf("%s.store: %q is not azblob or s3", cc.Field, cc.Store)
	}
	if _, err := newStore(); err != nil {
		return nil, err
	}
	return func(ctx context.Context) (publish.Sink, error) {
		inner, err := open(ctx)
		if err != nil {
			return nil, err
		}
		threshold := cc.ThresholdBytes
		if threshold == 0 {
			l, ok := inner.(publish.Limited)
			if !ok {
				inner.Close()
				return nil, publish.Permanent(fmt.Errorf("%s.threshold_bytes: not set, and the %s sink states no message limit to take it from "+
					"(set threshold_bytes to the largest payload the broker takes, less room for headers)", cc.Field, cfg.Kind))
			}
			threshold = max(1, l.MaxMessageBytes()-Headroom)
		}
		st, err := newStore()
		if err != nil {
			inner.Close()
			return nil, err
		}
		return New(inner, st, Options{Threshold: threshold, Prefix: *cc.Prefix, Slot: cc.Slot, Timeout: cc.Timeout.D(), Log: log}), nil
	}, nil
}

// Options configures New.
type Options struct {
	// Threshold: a payload longer than this many bytes is stored.
	Threshold int
	// Prefix and Slot start the object names: Prefix + Slot + "/" + sink
	// + "/" + message id.
	Prefix, Slot string
	// Timeout bounds one upload (default 1m).
	Timeout time.Duration
	// Uploads is how many payloads of a batch are uploaded at once
	// (default DefaultUploads).
	Uploads int
	Log     zerolog.Logger
}

// DefaultUploads is how many payloads of a batch the claim check uploads
// at once: enough to overlap a few round trips to the store, few enough
// that a batch of large payloads does not hold many of them in flight.
const DefaultUploads = 4

// Sink is a claim-checking publish.Sink around another. Like every sink,
// Publish is called from one goroutine.
type Sink struct {
	inner   publish.Sink
	store   Store
	opt     Options
	metrics publish.ClaimCheckMetrics
}

// SetClaimCheckMetrics sets the counters uploads are counted in
// (publish.ClaimChecked); before it, none. Not concurrently with Publish.
func (s *Sink) SetClaimCheckMetrics(m publish.ClaimCheckMetrics) { s.metrics = m }

// SetSinkCounters hands c to the inner sink when it counts in them
// (publish.Counted). Not concurrently with Publish.
func (s *Sink) SetSinkCounters(c publish.SinkCounters) {
	if sc, ok := s.inner.(publish.Counted); ok {
		sc.SetSinkCounters(c)
	}
}

// resumingSink is a Sink around a publish.Resumer, which it stays.
type resumingSink struct {
	*Sink
	publish.Resumer
}

// New returns inner with a claim check in front: see the package doc.
// The result is a publish.Resumer when inner is one.
func New(inner publish.Sink, store Store, opt Options) publish.Sink {
	if opt.Timeout <= 0 {
		opt.Timeout = time.Minute
	}
	if opt.Uploads <= 0 {
		opt.Uploads = DefaultUploads
	}
	s := &Sink{inner: inner, store: store, opt: opt}
	if r, ok := inner.(publish.Resumer); ok {
		return resumingSink{s, r}
	}
	return s
}

// Name returns the inner sink's name.
func (s *Sink) Name() string { return s.inner.Name() }

// Close closes the inner sink.
func (s *Sink) Close() error { return s.inner.Close() }

// Schedules reports whether the inner sink holds messages back until
// their DeliverAt (publish.Scheduler): the claim check keeps a message's
// DeliverAt and ExpiresAt, so the runner must see the inner sink's answer,
// or it would refuse every scheduled message of a sink that schedules.
func (s *Sink) Schedules() bool { return publish.Schedules(s.inner) }

// ObjectName returns the name of m's object for sink.
func (s *Sink) ObjectName(m *message.Message) string {
	return s.opt.Prefix + url.PathEscape(s.opt.Slot) + "/" + url.PathEscape(s.inner.Name()) + "/" + url.PathEscape(m.ID)
}

// Publish uploads the payloads of msgs over the threshold, Options.Uploads
// at a time, then, once every one of them succeeded, publishes msgs with
// those payloads replaced by references. An upload that fails cancels
// the others and fails the call, retryably, before anything is
// published.
func (s *Sink) Publish(ctx context.Context, msgs []*message.Message) error {
	var big []int
	for i, m := range msgs {
		if len(m.Payload) > s.opt.Threshold {
			big = append(big, i)
		}
	}
	if len(big) == 0 {
		return s.inner.Publish(ctx, msgs)
	}
	out := slices.Clone(msgs)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.opt.Uploads)
	for _, i := range big {
		g.Go(func() error {
			c, err := s.claim(gctx, msgs[i])
			if err != nil {
				return err
			}
			out[i] = c // each goroutine its own element
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	return s.inner.Publish(ctx, out)
}

// errUploadTimeout is the cause of an upload's deadline.
var errUploadTimeout = errors.New("claim check: upload timed out")

// claim uploads m's payload and returns the message to send instead.
func (s *Sink) claim(ctx context.Context, m *message.Message) (*message.Message, error) {
	name := s.ObjectName(m)
	uctx, cancel := context.WithTimeoutCause(ctx, s.opt.Timeout, errUploadTimeout)
	defer cancel()
	ref, err := s.store.Put(uctx, name, m.Payload, envelope.ContentType(m))
	if err != nil && ctx.Err() == nil && s.metrics.UploadFailures != nil {
		s.metrics.UploadFailures.Inc() // not the relay stopping
	}
	if err == nil {
		if s.metrics.Uploads != nil {
			s.metrics.Uploads.Inc()
		}
		if s.metrics.UploadBytes != nil {
			s.metrics.UploadBytes.Add(float64(len(m.Payload)))
		}
	}
	if err != nil {
		if cause := context.Cause(uctx); errors.Is(cause, errUploadTimeout) {
			err = fmt.Errorf("%w after %v: %w", cause, s.opt.Timeout, err)
		}
		return nil, fmt.Errorf("claim check: storing the %d-byte payload of %s as %s (retried like a failed publish): %w",
			len(m.Payload), publish.Describe(m), name, err)
	}
	sum := sha256.Sum256(m.Payload)
	c := *m
	c.Payload = []byte{}
	c.PayloadJSON = false
	// The reference travels apart from the headers column (which the
	// row wrote): every sink writes it after the column's entries and
	// leaves the column's walpost-* entries out (docs/security.md, "The
	// relay's headers").
	c.ClaimCheck = &message.ClaimRef{Ref: ref, Size: len(m.Payload), SHA256: hex.EncodeToString(sum[:])}
	s.opt.Log.Debug().Str("msg_id", m.ID).Str("trace_id", m.TraceID()).Str("object", name).Int("bytes", len(m.Payload)).Msg("payload stored by the claim check")
	return &c, nil
}

// Start runs the inner sink's start-up check (publish.Starter): the claim
// check's store is reached at the first large payload.
func (s *Sink) Start(ctx context.Context) error { return publish.Start(ctx, s.inner) }
