package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/replay"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/store"
)

// Options configure a Room.
type Options struct {
	// Log records what the sinks opened by an action say.
	Log zerolog.Logger
	// Redact cuts secrets out of the errors a view shows (nil: none).
	Redact func(string) string
	// Sinks, when set, returns the sinks of the relay running in this
	// process (relay.Relay.Lent): the actions publish through them
	// (replay.Resender.Borrow), so that the console of cdc run acts beside
	// the relay, a file sink included.
	Sinks func() []publish.Sink
	// CheckProgressTopics makes Status read the progress topic of every
	// kafka sink with exactly_once and warn of the forged progress records
	// cdc run would refuse (kafkaProgressCautions): cdc status sets it; the
	// console, whose view is polled, leaves it off so as not to wait on
	// brokers.
	CheckProgressTopics bool
}

// Room is one source's operations: its configuration and the connection
// every view and action of the Room uses. Not safe for concurrent use.
type Room struct {
	cfg     *config.Config
	conns   *replication.Conns
	t       store.Tables
	log     zerolog.Logger
	redact  func(string) string
	sinks   func() []publish.Sink
	topics  bool // Options.CheckProgressTopics
	checked bool // trust and the dead-letter table's readiness checked (ready)
}

// Open connects to cfg's source (postgres.url, and postgres.primary_url
// when the slot is on a standby). The caller closes the Room.
func Open(ctx context.Context, cfg *config.Config, o Options) (*Room, error) {
	conns, err := replication.OpenConns(ctx, cfg.Postgres.URL, cfg.Postgres.PrimaryURL)
	if err != nil {
		return nil, err
	}
	if o.Redact == nil {
		o.Redact = func(s string) string { return s }
	}
	return &Room{cfg: cfg, conns: conns, t: store.TablesOf(cfg), log: o.Log, redact: o.Redact, sinks: o.Sinks,
		topics: o.CheckProgressTopics}, nil
}

// Close closes the Room's connections.
func (r *Room) Close() { r.conns.Close() }

// ready checks, once per Room and read-only, that trusted roles own the
// state tables (store.CheckOwners) and that the dead-letter table exists
// with the current layout (store.CheckParkedTable).
func (r *Room) ready(ctx context.Context) error {
	if r.checked {
		return nil
	}
	if _, err := store.CheckOwners(ctx, r.conns.State, r.t, store.TrustOf(r.cfg)); err != nil {
		return err
	}
	if err := store.CheckParkedTable(ctx, r.conns.State, r.t); err != nil {
		return err
	}
	r.checked = true
	return nil
}

// resender is a replay.Resender on the Room's connection.
func (r *Room) resender() *replay.Resender {
	x := replay.NewResender(r.conns.State, r.cfg, r.log)
	if r.sinks != nil {
		x.Borrow(r.sinks)
	}
	return x
}

// ErrNotFound is in the error for names that select no parked row (a
// NotFoundError).
var ErrNotFound = errors.New("ops: no such parked message")

// NotFoundError names what selected no parked row.
type NotFoundError struct {
	Missing []string
	msg     string
}

func (e *NotFoundError) Error() string { return e.msg }

// Is makes errors.Is(err, ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// notFound is the error for names that select no parked row.
func (r *Room) notFound(missing []string) error {
	return &NotFoundError{Missing: missing, msg: fmt.Sprintf("no parked message of slot %s in %s is %s (see cdc dead-letter list)",
		r.t.Slot, r.t.DeadLetterName, strings.Join(missing, ", "))}
}

// Lag reads the slot's lag in bytes (current WAL - confirmed; 0 when the
// slot is missing) on a connection of its own: the console samples it.
func Lag(ctx context.Context, cfg *config.Config) (int64, error) {
	conn, err := pgconnect.Connect(ctx, cfg.Postgres.URL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	info, err := replication.ReadSlot(ctx, conn, cfg.Postgres.Slot)
	return info.LagBytes, err
}
