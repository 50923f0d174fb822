package replication

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/internal/pgconnect"
)

// Sentinel errors of failover slots (postgres.failover_slot).
var (
	// ErrFailoverUnsupported: the server is older than PostgreSQL 17, which
	// has no failover slots.
	ErrFailoverUnsupported = errors.New("replication: failover slots need PostgreSQL 17 or later")
	// ErrNotFailoverSlot: the slot exists without failover = true.
	ErrNotFailoverSlot = errors.New("replication: slot is not a failover slot")
)

// failoverVersion is the first server_version_num with failover slots.
const failoverVersion = 170000

// SlotOptions are the options of a slot cdc init creates.
type SlotOptions struct {
	// Failover creates the slot with failover = true (PostgreSQL 17+):
	// standbys with sync_replication_slots = on keep a copy of it.
	Failover bool
}

// ServerVersion returns the server's version as server_version_num gives
// it (150004 for 15.4). Every check of the server's version reads it here
// (a replication connection from its start-up parameters, with the same
// parsing: parseServerVersion).
func ServerVersion(ctx context.Context, conn *pgx.Conn) (int, error) {
	var num, version string
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num'), current_setting('server_version')").Scan(&num, &version); err != nil {
		return 0, fmt.Errorf("reading server_version_num: %w", err)
	}
	return parseServerVersion(num, version)
}

// parseServerVersion returns the version server_version_num gives (num),
// else, when num is empty (a replication connection's start-up
// parameters hold it from PostgreSQL 16 on), the one server_version gives
// ("15.4 (Debian 15.4-1)": 150004, "17beta1": 170000, "9.6.24": 90624).
func parseServerVersion(num, version string) (int, error) {
	if v, err := strconv.Atoi(num); err == nil && v > 0 {
		return v, nil
	}
	var major, minor, patch int
	n, _ := fmt.Sscanf(version, "%d.%d.%d", &major, &minor, &patch)
	switch {
	case n == 0 || major <= 0:
		return 0, fmt.Errorf("replication: cannot read the server's version from server_version_num %q, server_version %q", num, version)
	case major >= 10:
		return major*10000 + minor, nil
	}
	return major*10000 + minor*100 + patch, nil
}

// CheckFailoverSupported refuses a server without failover slots.
func CheckFailoverSupported(ctx context.Context, conn *pgx.Conn) error {
	v, err := ServerVersion(ctx, conn)
	if err != nil {
		return err
	}
	if v < failoverVersion {
		return fmt.Errorf("%w: postgres.failover_slot is true but this server is PostgreSQL %d.%d; upgrade to PostgreSQL 17+ or set postgres.failover_slot: false "+
			"(the slot then exists on the primary only: after a failover, walpost stops and cdc init must create a new slot, see docs/operations.md, \"Failover\")",
			ErrFailoverUnsupported, v/10000, v%10000)
	}
	return nil
}

// CheckFailoverSlot checks that the server has failover slots and that
// the slot is one (`cdc run` with postgres.failover_slot: true).
func CheckFailoverSlot(ctx context.Context, conn *pgx.Conn, slot string) error {
	if err := CheckFailoverSupported(ctx, conn); err != nil {
		return err
	}
	var failover bool
	if err := conn.QueryRow(ctx, "SELECT failover FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&failover); err != nil {
		return fmt.Errorf("reading whether slot %q is a failover slot: %w", slot, err)
	}
	if !failover {
		return fmt.Errorf("%w: postgres.failover_slot is true but slot %q was created without failover; with every relay stopped, run on a replication connection "+
			"(psql \"dbname=… replication=database\"): ALTER_REPLICATION_SLOT %s (FAILOVER true)", ErrNotFailoverSlot, slot, slot)
	}
	return nil
}

// createSlotSQL is the statement that creates the pgoutput slot ($1).
func createSlotSQL(opts SlotOptions) string {
	if opts.Failover {
		return "SELECT pg_create_logical_replication_slot($1, 'pgoutput', failover => true)"
	}
	return "SELECT pg_create_logical_replication_slot($1, 'pgoutput')"
}

// Timeline returns the timeline the server is on (IDENTIFY_SYSTEM on a
// replication connection to url) and its system identifier. A timeline
// above 1 means the server was promoted from a standby, or restored from
// a backup to a point in time, at some point of its history.
func Timeline(ctx context.Context, url string) (timeline int32, systemID string, err error) {
	cfg, err := pgconnect.ReplicationConfig(url)
	if err != nil {
		return 0, "", err
	}
	pg, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, "", fmt.Errorf("connecting for replication to %s: %w", pgconnect.Describe(cfg), err)
	}
	defer pg.Close(context.Background())
	id, err := pglogrepl.IdentifySystem(ctx, pg)
	if err != nil {
		return 0, "", fmt.Errorf("IDENTIFY_SYSTEM: %w", err)
	}
	return id.Timeline, id.SystemID, nil
}
