package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/store"
)

// ErrAdoptFailover: cdc init --adopt creates the slot on a replication
// connection (CREATE_REPLICATION_SLOT … EXPORT_SNAPSHOT), without failover.
var ErrAdoptFailover = errors.New("relay: cdc init --adopt does not create failover slots")

// failoverSlotOptions returns how cdc init creates the slot, refusing
// postgres.failover_slot on a server without failover slots (before
// anything is created).
func failoverSlotOptions(ctx context.Context, conn *pgx.Conn, cfg *config.Config, opts SetupOptions) (replication.SlotOptions, error) {
	if !cfg.Postgres.FailoverSlot {
		return replication.SlotOptions{}, nil
	}
	if err := replication.CheckFailoverSupported(ctx, conn); err != nil {
		return replication.SlotOptions{}, err
	}
	if opts.Adopt {
		return replication.SlotOptions{}, fmt.Errorf("%w: run cdc init --adopt with postgres.failover_slot: false, then, with no relay running, "+
			"ALTER_REPLICATION_SLOT %s (FAILOVER true) on a replication connection, and set postgres.failover_slot: true again", ErrAdoptFailover, cfg.Postgres.Slot)
	}
	return replication.SlotOptions{Failover: true}, nil
}

// missingSlotTimeout bounds what explainMissingSlot reads from the server.
const missingSlotTimeout = 10 * time.Second

// explainMissingSlot turns a missing slot into the explanation of a
// failover when there is evidence that the slot existed: this process
// streamed from it (streamed), the progress table records positions of
// it, or the server is on a timeline above 1 (it was promoted). Without
// evidence, or for any other error, it returns err: a slot never created
// is for cdc init. walpost never creates the slot itself: a new slot
// starts at the server's current position, past messages the old slot had
// not confirmed.
func (r *Relay) explainMissingSlot(err error, streamed bool) error {
	if !errors.Is(err, replication.ErrSlotMissing) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), missingSlotTimeout)
	defer cancel()
	url := r.cfg.Postgres.URL
	server := pgconnect.DescribeURL(url)
	var evidence []string
	if streamed {
		evidence = append(evidence, "this process was streaming from it until its connection was lost")
	}
	if conn, cerr := pgconnect.Connect(ctx, url); cerr == nil {
		var addr string
		if conn.QueryRow(ctx, "SELECT COALESCE(host(inet_server_addr()) || ':' || current_setting('port'), 'local socket')").Scan(&addr) == nil {
			server = addr
		}
		if progress, perr := store.LoadProgress(ctx, conn, r.tables); perr == nil && len(progress) > 0 {
			var at []string
			for sink, p := range progress {
				at = append(at, fmt.Sprintf("%s at %s", sink, p.CommitLSN))
			}
			slices.Sort(at)
			evidence = append(evidence, fmt.Sprintf("%s records what sinks acknowledged from it (%s)", r.tables.Progress, strings.Join(at, ", ")))
		}
		conn.Close(context.Background())
	}
	timelineOnly := len(evidence) == 0
	if tl, _, terr := replication.Timeline(ctx, url); terr == nil && tl > 1 {
		evidence = append(evidence, fmt.Sprintf("this server is on timeline %d: it was promoted from a standby (or restored from a backup) at some point", tl))
	}
	if len(evidence) == 0 {
		return err
	}
	cfg, slot := r.ConfigPath, r.cfg.Postgres.Slot
	resend := fmt.Sprintf("then re-send what the sinks may have missed from the outbox table with cdc replay --config %s --since <a time before the failover> "+
		"(inboxes drop the copies by id); or do both in one step, nothing lost: cdc recover --config %s creates the slot and hands it every row not proven delivered", cfg, cfg)
	if r.cfg.Postgres.TableLess() {
		resend = "a table-less outbox (postgres.source: messages) keeps no rows to replay, so what the sinks may have missed can only be emitted " +
			"again by the application (inboxes drop the copies by id)"
	}
	msg := fmt.Sprintf("slot %q does not exist on the server at %s, yet %s. The likely cause is a failover to a server the slot was not synchronized to "+
		"(a promoted standby: a slot that is not a failover slot lives on its primary only), or the slot was dropped. "+
		"walpost never creates a slot by itself: a new slot starts at this server's current WAL position, so messages committed after the old slot's "+
		"last confirmed position (or not yet synchronized to this server) would not be relayed by it. To go on: stop every relay on this slot; "+
		"run cdc init --config %s (the new slot streams only what is committed from then on); %s. "+
		"To keep the slot through failovers on PostgreSQL 17+, set postgres.failover_slot: true and synchronize it to the standbys (README, \"Failover\")",
		slot, server, strings.Join(evidence, "; "), cfg, resend)
	if timelineOnly {
		msg += fmt.Sprintf(". If no relay ever streamed from slot %q on this database, just run cdc init --config %s", slot, cfg)
	}
	return fmt.Errorf("%w: %s", replication.ErrSlotMissing, msg)
}
