package main

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/walpost/walpost/internal/admin"
)

// recoverOptions are the flags of cdc recover.
type recoverOptions struct {
	recoverSince  string        // --since DURATION | TIMESTAMP
	recoverMargin time.Duration // --margin
	recover       admin.RecoverOptions
}

func recoverCommand() *command {
	return &command{name: "recover", trusts: true, summary: "replace a slot the server invalidated (wal_status lost) and relay again every outbox row not proven delivered",
		about: recoverAbout, exits: recoverExits, withConfig: true, run: recoverCmd, check: checkRecover,
		flags: func(fs *flag.FlagSet, o *options) {
			fs.StringVar(&o.recoverSince, "since", "", "relay again every row whose time is at or after this `time`: a duration back from now (24h) or a timestamp (2026-01-02T15:04:05Z); overrides what the tables record")
			fs.DurationVar(&o.recoverMargin, "margin", 5*time.Minute, "the longest a producer's transaction takes from setting a row's time to its commit (and any clock skew): the bound taken from the progress table is moved back by it")
		}}
}

const recoverAbout = `Recover from a slot the server invalidated (wal_status lost: the WAL it
needed was removed by max_slot_wal_keep_size, or idle_replication_slot_timeout
on PostgreSQL 18), or from a slot that is gone (dropped by hand, or a
failover to a server without it), with nothing lost: the outbox table still
holds the rows. Stop every relay on the slot first. recover drops the
invalidated slot, creates a new one of the same name with an exported
snapshot and, in that snapshot, hands to the stream every row not proven
delivered, with its own id; then cdc run relays them, and streams what
commits after. Some may be duplicates (inboxes drop them by id).

Not proven delivered means: with --since, every row whose time is at or
after it; else with columns.sent_at, every row where it is NULL; else with
relay.retention, every row newer than the newest mark the old slot
confirmed (less relay.retention.margin); else every row newer than the last
commit every sink acknowledged (the progress table), less --margin. Rows
are selected by time with columns.time, else relay.retention.column, else
the default layout's created_at, and handed over in the order they were
inserted as far as the table tells (columns.order, or the default table's
seq; else time, then id). When nothing tells, recover changes
nothing and asks for --since. It refuses a slot the server has not
invalidated (a usable slot is never dropped) and a slot in use.`

var recoverExits = []string{"0  the new slot holds the rows not proven delivered: start cdc run",
	"1  refused (a usable slot, a slot in use, nothing tells which rows were delivered) or failed; the error says what to do", usageExit}

// checkRecover parses --since: a duration or a timestamp.
func checkRecover(o *options) error {
	if o.recoverMargin < 0 {
		return fmt.Errorf("--margin %v: give 0 or a positive duration", o.recoverMargin)
	}
	o.recover.Margin = o.recoverMargin
	if o.recoverSince == "" {
		return nil
	}
	if d, err := time.ParseDuration(o.recoverSince); err == nil {
		if d <= 0 {
			return fmt.Errorf("--since %s: give a positive duration (24h)", o.recoverSince)
		}
		o.recover.SinceAgo = d
		return nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05Z07:00", "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, o.recoverSince); err == nil {
			o.recover.Since = t // without a zone: UTC
			return nil
		}
	}
	return errors.New("--since " + o.recoverSince + ": give a duration (24h, 90m) or a timestamp (2026-01-02T15:04:05Z; UTC when it has no zone)")
}

func recoverCmd(e *cmdEnv) error {
	return admin.Recover(e.ctx, e.cfg, e.opts.recover, func(line string) { fmt.Fprintln(e.stdout, line) })
}
