// Package explain holds the explanations cdc run gives when it cannot go
// on, with the way out: a missing slot (a failover to a server without
// it: cdc init, cdc replay or cdc recover), a slot the server invalidated
// (cdc recover), a publication dropped and created again (cdc resync), a
// row the relay stopped at (cdc skip, cdc resync, fixing the row). Each
// reads what it needs from the server on a short connection of its own;
// the commands it names are in internal/admin.
package explain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/pgconnect"
	"github.com/walpost/walpost/internal/replication"
	"github.com/walpost/walpost/internal/store"
)

// Run is what the explanations know of the relay.
type Run struct {
	Config *config.Config
	// ConfigPath names the configuration file in the commands given.
	ConfigPath string
	Tables     store.Tables
	Target     replication.Target
	// SlotRead, when set, is told what InvalidSlot read of the slot (the
	// relay's metrics).
	SlotRead func(replication.SlotInfo)
}

// missingSlotTimeout bounds what MissingSlot reads from the server.
const missingSlotTimeout = 10 * time.Second

// MissingSlot turns a missing slot into the explanation of a
// failover when there is evidence that the slot existed: this process
// streamed from it (streamed), the progress table records positions of
// it, or the server is on a timeline above 1 (it was promoted). Without
// evidence, or for any other error, it returns err: a slot never created
// is for cdc init. walpost never creates the slot itself: a new slot
// starts at the server's current position, past messages the old slot had
// not confirmed.
func (r Run) MissingSlot(err error, streamed bool) error {
	if !errors.Is(err, replication.ErrSlotMissing) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), missingSlotTimeout)
	defer cancel()
	url := r.Config.Postgres.URL
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
		state := conn
		if r.Config.Postgres.FromStandby() {
			if pc, perr := pgconnect.Connect(ctx, r.Config.Postgres.PrimaryURL); perr == nil {
				defer pc.Close(context.Background())
				state = pc
			}
		}
		if progress, perr := store.LoadProgress(ctx, state, r.Tables); perr == nil && len(progress) > 0 {
			var at []string
			for sink, p := range progress {
				at = append(at, fmt.Sprintf("%s at %s", sink, p.CommitLSN))
			}
			slices.Sort(at)
			evidence = append(evidence, fmt.Sprintf("%s records what sinks acknowledged from it (%s)", r.Tables.Progress, strings.Join(at, ", ")))
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
	cfg, slot := r.ConfigPath, r.Config.Postgres.Slot
	resend := fmt.Sprintf("then re-send what the sinks may have missed from the outbox table with cdc replay --config %s --since <a time before the failover> "+
		"(inboxes drop the copies by id); or do both in one step, nothing lost: cdc recover --config %s creates the slot and hands it every row not proven delivered", cfg, cfg)
	if r.Config.Postgres.TableLess() {
		resend = "a table-less outbox (postgres.source: messages) keeps no rows to replay, so what the sinks may have missed can only be emitted " +
			"again by the application (inboxes drop the copies by id)"
	}
	msg := fmt.Sprintf("slot %q does not exist on the server at %s, yet %s. The likely cause is a failover to a server the slot was not synchronized to "+
		"(a promoted standby: a slot that is not a failover slot lives on its primary only), or the slot was dropped. "+
		"walpost never creates a slot by itself: a new slot starts at this server's current WAL position, so messages committed after the old slot's "+
		"last confirmed position (or not yet synchronized to this server) would not be relayed by it. To go on: stop every relay on this slot; "+
		"run cdc init --config %s (the new slot streams only what is committed from then on); %s. "+
		"To keep the slot through failovers on PostgreSQL 17+, set postgres.failover_slot: true and synchronize it to the standbys (docs/operations.md, \"Failover\")",
		slot, server, strings.Join(evidence, "; "), cfg, resend)
	if timelineOnly {
		msg += fmt.Sprintf(". If no relay ever streamed from slot %q on this database, just run cdc init --config %s", slot, cfg)
	}
	return fmt.Errorf("%w: %s", replication.ErrSlotMissing, msg)
}

// InvalidSlot turns the error a run stopped with into the
// explanation of an invalidated slot when the server says the slot is
// invalidated (wal_status lost, or an invalidation_reason): whatever the
// error (the server's refusal to stream from it, with its DETAIL, or the
// connection its checkpointer ended), the run cannot go on from this slot,
// and what to do is cdc recover (docs/design.md, "A lost slot"). Any other
// error is returned as it is.
func (r Run) InvalidSlot(err error) error {
	if err == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), missingSlotTimeout)
	defer cancel()
	conn, cerr := pgconnect.Connect(ctx, r.Config.Postgres.URL)
	if cerr != nil {
		return err
	}
	defer conn.Close(context.Background())
	info, rerr := replication.ReadSlot(ctx, conn, r.Config.Postgres.Slot)
	if rerr != nil || !info.Invalid() {
		return err
	}
	if r.SlotRead != nil {
		r.SlotRead(info)
	}
	server := err.Error()
	if errors.Is(err, replication.ErrSlotInvalidated) {
		server = "" // the check's own words, said below
	}
	slot, cfg := r.Config.Postgres.Slot, r.ConfigPath
	way := fmt.Sprintf("The outbox rows are still in the table: stop every relay on this slot and run cdc recover --config %s: it drops the invalidated slot, "+
		"creates a new one and relays again every row not proven delivered (duplicates possible, inboxes drop them by id; nothing lost), "+
		"then start cdc run --config %s again", cfg, cfg)
	if r.Config.Postgres.TableLess() {
		way = fmt.Sprintf("A table-less outbox (postgres.source: messages) keeps no rows to relay again: what was committed after the confirmed position can only be emitted again by the application. "+
			"Drop the slot (SELECT pg_drop_replication_slot('%s')) and run cdc init --config %s", slot, cfg)
	}
	if server != "" {
		server = " (the server said: " + server + ")"
	}
	keep := "raise max_slot_wal_keep_size (-1: no limit; and idle_replication_slot_timeout on PostgreSQL 18)"
	if info.Conflicting || info.Invalidation == "rows_removed" {
		keep = "keep hot_standby_feedback = on on the standby, with a physical slot on the primary (primary_slot_name), and turn it on before cdc recover " +
			"(docs/operations.md, \"Decoding from a standby\")"
	}
	msg := fmt.Sprintf("slot %q was invalidated by the server (wal_status %s%s): %s%s. It was confirmed up to %s; what was committed after that is no longer in the WAL it could stream. %s. "+
		"To keep slots from being invalidated, %s, and alert on walpost_slot_lost and cdc status",
		slot, info.WALStatus, info.ReasonNote(), info.InvalidReason(), server, info.ConfirmedFlush, way, keep)
	return fmt.Errorf("%w: %s", replication.ErrSlotInvalidated, msg)
}

// IsPublicationGone reports the WAL sender's error for a publication that
// did not exist at the WAL it decodes (SQLSTATE 42704 while streaming;
// at START_REPLICATION it is the slot's, ErrSlotMissing).
func IsPublicationGone(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42704" && !errors.Is(err, replication.ErrSlotMissing)
}

// PublicationGone tells the operator why the stream stops at the
// same place at every start, and the way out (docs/design.md, "The
// publication or the table changing under the relay").
func (r Run) PublicationGone(err error) error {
	cfg := r.Config
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	exists := true
	slotAt := "its confirmed position"
	if conn, cerr := pgconnect.Connect(ctx, cfg.Postgres.URL); cerr == nil {
		if info, err := replication.ReadSlot(ctx, conn, cfg.Postgres.Slot); err == nil && info.Exists {
			slotAt = info.ConfirmedFlush.String()
		}
		exists = !errors.Is(replication.CheckPublication(ctx, conn, r.Target), replication.ErrPublicationMissing)
		conn.Close(context.Background())
	}
	create := ""
	if !exists {
		create = fmt.Sprintf(", create the publication again (cdc init --config %s)", r.ConfigPath)
	}
	return fmt.Errorf("%w. Publication %q was dropped (and created again) after the slot's confirmed position %s: "+
		"the WAL sender decodes the WAL written since with the catalog of its time, in which the publication did not exist, and fails there at every start (restarting and cdc init do not help). "+
		"The rows committed since are in the outbox table. To go on without losing them, stop every relay on the slot%s and run: cdc resync --config %s "+
		"(it relays the rows committed since the slot's confirmed position from the table, with their own ids, then moves the slot past the publication's re-creation); then start cdc run again",
		err, cfg.Postgres.Publication, slotAt, create, r.ConfigPath)
}
