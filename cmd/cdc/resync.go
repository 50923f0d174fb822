package main

import (
	"errors"
	"flag"
	"fmt"

	"github.com/walpost/walpost/internal/admin"
	"github.com/walpost/walpost/internal/replay"
)

func resyncCommand() *command {
	return &command{name: "resync", trusts: true, summary: "relay the rows committed since the slot's confirmed position from the table, then move the slot to now (the way out of a stream that cannot go on)",
		about: resyncAbout, exits: resyncExits, withConfig: true, run: resyncCmd,
		flags: func(fs *flag.FlagSet, o *options) {
			fs.DurationVar(&o.since, "since", 0, "relay the rows of the last `duration` instead of those since the slot's confirmed position as the coverage table records it")
		}}
}

const resyncAbout = `The way out when the replication stream cannot go on from the slot's
confirmed position: the publication was dropped and created again (the
WAL sender decodes the WAL written before with the catalog of its time,
in which the publication did not exist, and fails there at every start),
or the relay stops at rows it cannot map whatever it does. Stop every
relay on the slot first.

resync checks that the publication publishes the outbox now, reads the
WAL insert position, publishes every row of the outbox table whose time
(columns.time, else created_at) is at or after a bound to every sink its
route takes, with its own id (as cdc replay does), and only then moves
the slot to that position (pg_replication_slot_advance) and records that
nothing is missing. The bound is postgres.gap_margin before the time the
coverage table records for the slot's confirmed position (a running
relay keeps it), or before an open gap's start, whichever is earlier; or
the last --since D. Every transaction that commits after the position is
streamed by the next cdc run; every one before it and after the slot's
confirmed position has its rows published here. Rows the stream had
carried already are sent again (receivers drop copies by id).`

var resyncExits = []string{"0  the rows were published and the slot moved",
	"1  refused (the slot in use, the publication not publishing the outbox, no record and no --since) or failed: the slot was not moved",
	usageExit}

func resyncCmd(e *cmdEnv) error {
	res, err := admin.Resync(e.ctx, e.ctx, e.cfg, admin.ResyncOptions{Since: e.opts.since, Progress: e.stderr, Log: e.log})
	switch {
	case errors.Is(err, replay.ErrTableLess):
		return &exitCode{err, usageExitCode}
	case err != nil:
		return err
	}
	fmt.Fprintf(e.stdout, "resync: published %d rows from %s (%d messages acknowledged by the sinks); slot %s moved from %s to %s\n",
		res.Replay.Rows, res.From.UTC().Format("2006-01-02T15:04:05.999999Z07:00"), res.Replay.Deliveries, e.cfg.Postgres.Slot, res.Slot, res.Target)
	return nil
}
