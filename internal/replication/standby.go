package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgconnect"
)

// Decoding from a standby (docs/operations.md, "Decoding from a standby").
//
// On PostgreSQL 16+ the slot may live on a physical standby (postgres.url)
// while the outbox, the publication and walpost's state tables live on
// its primary (postgres.primary_url): the standby is read-only, so every
// write goes to the primary, and the heartbeat's logical message too (a
// standby writes no WAL). CheckTopology checks that the two URLs are
// what they say; Conns opens both.

// Sentinel errors of CheckTopology; errors returned wrap them with what
// to do.
var (
	// ErrStandbyNoPrimary: postgres.url is a standby and
	// postgres.primary_url is not set.
	ErrStandbyNoPrimary = errors.New("replication: postgres.url is a standby but postgres.primary_url is not set")
	// ErrNotStandby: postgres.primary_url is set but postgres.url is not
	// a standby (never was, or was promoted).
	ErrNotStandby = errors.New("replication: postgres.primary_url is set but postgres.url is not a standby")
	// ErrSameServer: postgres.primary_url and postgres.url reach the same
	// server.
	ErrSameServer = errors.New("replication: postgres.primary_url and postgres.url are the same server")
	// ErrNotPrimary: postgres.primary_url is a standby itself, or not the
	// primary of postgres.url.
	ErrNotPrimary = errors.New("replication: postgres.primary_url is not the primary of postgres.url")
	// ErrStandbyVersion: the standby is older than PostgreSQL 16.
	ErrStandbyVersion = errors.New("replication: decoding on a standby needs PostgreSQL 16 or later")
)

// standbyVersion is the first server_version_num whose standbys decode.
const standbyVersion = 160000

// Topology is where the slot is read and where walpost writes.
type Topology struct {
	// Standby: postgres.url is a standby (pg_is_in_recovery()).
	Standby bool
	// Version is postgres.url's server_version_num.
	Version int
	// Feedback is the standby's hot_standby_feedback; PrimarySlot its
	// primary_slot_name ("" for none). Both only for a standby.
	Feedback    bool
	PrimarySlot string
	// Promoted: postgres.primary_url is set but postgres.url is a
	// promoted standby (not in recovery, of the primary's cluster, or on
	// a timeline above 1 while primary_url cannot be reached). Its slot
	// survived the promotion: the slot is read and the state written on
	// url, and primary_url is ignored (Cautions says to remove it).
	Promoted bool
}

// Describe is the topology in words, for logs and cdc status.
func (t Topology) Describe() string {
	if t.Promoted {
		return "promoted: postgres.url was a standby and is the primary now; the slot and the state tables on it, postgres.primary_url ignored"
	}
	if !t.Standby {
		return "primary: the slot and the state tables on postgres.url"
	}
	slot := "no physical slot (primary_slot_name is empty)"
	if t.PrimarySlot != "" {
		slot = "physical slot " + t.PrimarySlot
	}
	fb := "off"
	if t.Feedback {
		fb = "on"
	}
	return fmt.Sprintf("standby: the slot on postgres.url (a standby, PostgreSQL %d, hot_standby_feedback %s, %s), the state tables and heartbeats on postgres.primary_url",
		t.Version/10000, fb, slot)
}

// Cautions are what threatens a standby's slot without making it
// unusable (docs/operations.md, "Decoding from a standby"):
// hot_standby_feedback off, no physical slot between the standby and its
// primary. They are warnings, not refusals: the slot decodes until a
// conflict invalidates it, which the relay reports as a lost slot and
// cdc recover recovers from, nothing lost.
func (t Topology) Cautions() []string {
	if t.Promoted {
		return []string{"postgres.url was a standby and has been promoted: the relay reads the slot (which survived the promotion) and writes its state on it, " +
			"ignoring postgres.primary_url; remove postgres.primary_url from the configuration, and make sure the old primary takes no more writes " +
			"(rows committed there are not in this server's WAL)"}
	}
	if !t.Standby {
		return nil
	}
	var c []string
	if !t.Feedback {
		c = append(c, "hot_standby_feedback is off on the standby (postgres.url): the primary's VACUUM may then remove catalog rows the slot still needs, "+
			"and the standby invalidates the slot (rows_removed: a lost slot, for cdc recover); set hot_standby_feedback = on on the standby "+
			"(ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf())")
	}
	if t.PrimarySlot == "" {
		c = append(c, "the standby streams from its primary without a physical slot (primary_slot_name is empty): hot_standby_feedback then holds back the primary's VACUUM only while the standby is connected, "+
			"and catalog rows removed meanwhile invalidate the slot (rows_removed); create a physical slot on the primary and set primary_slot_name on the standby")
	}
	return c
}

// CheckTopology reads the topology of src (postgres.url) and checks it
// against state (postgres.primary_url's connection; nil when it is not
// set): a standby needs a primary_url that reaches its primary, a primary
// needs none, a standby must be PostgreSQL 16+ with wal_level logical
// on the primary. hot_standby_feedback off is not refused: Cautions
// says why it should be on.
func CheckTopology(ctx context.Context, src, state *pgx.Conn) (Topology, error) {
	var t Topology
	var inRecovery bool
	var srcID string
	if err := src.QueryRow(ctx, "SELECT pg_is_in_recovery(), (SELECT system_identifier::text FROM pg_control_system())").Scan(&inRecovery, &srcID); err != nil {
		return t, fmt.Errorf("reading whether postgres.url is a standby: %w", err)
	}
	t.Standby = inRecovery
	v, err := ServerVersion(ctx, src)
	if err != nil {
		return t, err
	}
	t.Version = v
	if t.Standby {
		var fb, slot string
		if err := src.QueryRow(ctx, "SELECT current_setting('hot_standby_feedback'), current_setting('primary_slot_name')").Scan(&fb, &slot); err != nil {
			return t, fmt.Errorf("reading the standby's settings: %w", err)
		}
		t.Feedback, t.PrimarySlot = fb == "on", slot
	}
	if state == nil {
		if t.Standby {
			return t, fmt.Errorf("%w: the server of postgres.url is in recovery (a physical standby), which cannot hold walpost's state tables or write its heartbeats; "+
				"to read the slot on this standby (PostgreSQL 16+), set postgres.primary_url to its primary (docs/operations.md, \"Decoding from a standby\"), or point postgres.url at the primary",
				ErrStandbyNoPrimary)
		}
		return t, nil
	}
	var stateRecovery bool
	var stateID, stateStart, srcStart string
	if err := state.QueryRow(ctx, "SELECT pg_is_in_recovery(), (SELECT system_identifier::text FROM pg_control_system()), pg_postmaster_start_time()::text").
		Scan(&stateRecovery, &stateID, &stateStart); err != nil {
		return t, fmt.Errorf("reading whether postgres.primary_url is a primary: %w", err)
	}
	if err := src.QueryRow(ctx, "SELECT pg_postmaster_start_time()::text").Scan(&srcStart); err != nil {
		return t, fmt.Errorf("reading postgres.url's start time: %w", err)
	}
	switch {
	case !t.Standby && stateRecovery && stateID == srcID:
		return t, fmt.Errorf("%w: the server of postgres.url is the primary and the one of postgres.primary_url its standby: swap them "+
			"(url is where the slot is read, a standby; primary_url its primary)", ErrNotStandby)
	case !t.Standby && stateID == srcID && stateStart == srcStart && !stateRecovery:
		return t, fmt.Errorf("%w: both reach one server (system identifier %s); postgres.primary_url is only for a slot read on a standby: remove it", ErrSameServer, srcID)
	case !t.Standby && stateID == srcID:
		// Another server of the same cluster, not in recovery: a
		// promoted standby, whose slot survived.
		t.Promoted = true
		return t, nil
	case !t.Standby:
		return t, fmt.Errorf("%w: the server of postgres.url is not in recovery; postgres.primary_url is only for a slot read on a physical standby (PostgreSQL 16+): remove it, "+
			"or point postgres.url at a standby of postgres.primary_url", ErrNotStandby)
	case stateRecovery:
		return t, fmt.Errorf("%w: the server of postgres.primary_url is in recovery (a standby itself); point it at the primary, where the outbox is written", ErrNotPrimary)
	case stateID != srcID:
		return t, fmt.Errorf("%w: their system identifiers differ (%s on postgres.url, %s on postgres.primary_url): the standby replicates another cluster; point postgres.primary_url at its primary",
			ErrNotPrimary, srcID, stateID)
	case t.Version < standbyVersion:
		return t, fmt.Errorf("%w: the standby of postgres.url is PostgreSQL %d.%d, which cannot hold a logical slot; upgrade to 16+ or point postgres.url at the primary and remove postgres.primary_url",
			ErrStandbyVersion, t.Version/10000, t.Version%10000)
	}
	var level string
	if err := state.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return t, fmt.Errorf("reading the primary's wal_level: %w", err)
	}
	if level != "logical" {
		return t, fmt.Errorf("%w: wal_level is %s on the primary (postgres.primary_url); decoding on its standby needs wal_level = logical on the primary: set it and restart the primary",
			ErrWALLevel, level)
	}
	return t, nil
}

// Conns are the two ordinary connections of walpost's checks: Slot to
// postgres.url (the slot's server), State to where the state tables are
// (postgres.primary_url; Slot itself when it is not set). Not safe for
// concurrent use.
type Conns struct {
	Slot, State *pgx.Conn
	Topology    Topology
}

// OpenConns connects to url and, when primaryURL is set, to primaryURL,
// and checks the topology (CheckTopology). A failed connection's error
// is pgconnect's, for the caller to classify (pgconnect.Refused); the
// connections are closed on any error.
//
// A promoted standby (Topology.Promoted) is found whether or not the old
// primary can be reached: when primaryURL cannot be, url not in recovery
// and on a timeline above 1 (IDENTIFY_SYSTEM) is taken for promoted.
// Both connections are then url's.
func OpenConns(ctx context.Context, url, primaryURL string) (*Conns, error) {
	src, err := pgconnect.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	c := &Conns{Slot: src, State: src}
	var state *pgx.Conn
	if primaryURL != "" {
		if state, err = pgconnect.Connect(ctx, primaryURL); err != nil {
			if t, ok := promotedAlone(ctx, src, url); ok {
				c.Topology = t
				return c, nil
			}
			src.Close(context.Background())
			return nil, fmt.Errorf("postgres.primary_url: %w", err)
		}
		c.State = state
	}
	if c.Topology, err = CheckTopology(ctx, src, state); err != nil {
		c.Close()
		return nil, err
	}
	if c.Topology.Promoted {
		state.Close(context.Background())
		c.State = src
	}
	return c, nil
}

// promotedAlone reports, when the primary cannot be reached, whether src
// (at url) is a promoted standby: not in recovery, on a timeline above 1.
func promotedAlone(ctx context.Context, src *pgx.Conn, url string) (Topology, bool) {
	var recovering bool
	if err := src.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovering); err != nil || recovering {
		return Topology{}, false
	}
	tl, _, err := Timeline(ctx, url)
	if err != nil || tl <= 1 {
		return Topology{}, false
	}
	v, err := ServerVersion(ctx, src)
	if err != nil {
		return Topology{}, false
	}
	return Topology{Promoted: true, Version: v}, true
}

// Close closes both connections.
func (c *Conns) Close() {
	if c.State != c.Slot {
		c.State.Close(context.Background())
	}
	c.Slot.Close(context.Background())
}

// Standby reports whether the slot is read on a standby.
func (c *Conns) Standby() bool { return c.Topology.Standby }

// snapshotEvery is how often EnsureSlotOnStandby asks the primary to log
// a running-xacts record while the slot is being created.
const snapshotEvery = 200 * time.Millisecond

// EnsureSlotOnStandby is EnsureSlot on a standby (src) of primary: a
// logical slot created on a standby reaches its consistent point only at
// a running-xacts record from the primary, which the primary writes every
// 15 s while it writes WAL, or at a checkpoint; pg_log_standby_snapshot()
// on primary, every snapshotEvery until the slot is made, writes one at
// once. Where the role may not call it (a superuser's by default), the
// creation waits for the primary's own record.
func EnsureSlotOnStandby(ctx context.Context, src, primary *pgx.Conn, slot string) (SlotInfo, bool, error) {
	type result struct {
		info    SlotInfo
		created bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		info, created, err := EnsureSlot(ctx, src, slot)
		done <- result{info, created, err}
	}()
	var snapErr error
	for {
		if snapErr == nil {
			if _, err := primary.Exec(ctx, "SELECT pg_log_standby_snapshot()"); err != nil && ctx.Err() == nil {
				snapErr = err // wait for the primary's own running-xacts record
			}
		}
		select {
		case r := <-done:
			if r.err != nil && snapErr != nil {
				r.err = fmt.Errorf("%w (pg_log_standby_snapshot() on the primary failed too: %v; the slot waited for the primary's own running-xacts record)", r.err, snapErr)
			}
			return r.info, r.created, r.err
		case <-time.After(snapshotEvery):
		}
	}
}
