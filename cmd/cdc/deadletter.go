package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/walpost/walpost/internal/ops"
)

func deadLetterCommand() *command {
	return &command{name: "dead-letter", summary: "list | show ID | resend ID… | resend --all | drop ID…: the parked messages",
		about: deadLetterAbout, exits: deadLetterExits, withConfig: true, logFormat: true, run: deadLetterCmd, check: checkDeadLetter,
		argsUsage: "list | show ID... | resend ID... | resend --all | drop ID...",
		flags: func(fs *flag.FlagSet, o *options) {
			fs.BoolVar(&o.json, "json", false, "list, show: print a JSON array of the parked rows (row_data included) instead of text")
			fs.BoolVar(&o.all, "all", false, "resend: every parked message not resent yet (with --sink: those that sink refused)")
			fs.StringVar(&o.sink, "sink", "", "list, show, resend, drop: only the messages the sink `name` refused")
		}}
}

const deadLetterAbout = `Handle the parked messages of the slot (postgres.dead_letter_table): rows
that could not be mapped (relay.on_invalid: dead_letter, cdc skip; sink
"-") and messages a sink refused for good (relay.on_refused: dead_letter).

  list           a table: id, lsn, sink, parked_at, resent_at, error excerpt
  show ID...     each in full, row_data pretty-printed
  resend ID...   publish again and mark resent (resent_at): a refused
                 message exactly as parked (same id, same bytes) to the
                 sink that refused it; a row that could not be mapped,
                 decoded again with the current mapping (fix its row_data,
                 or the config, first), to every sink whose route takes
                 it. Each failure is reported; the others go on.
                 With postgres.message_keys, an envelope that no key
                 signed (the relay parked it as forged) is refused,
                 reported, and stays parked: drop it.
                 A message of a held key (relay.on_invalid or
                 on_refused: hold_key) is resent with the key's other
                 parked messages, in order, from the first one (which
                 must be the one named, or named with it); the key is
                 released once all are resent.
  resend --all   every parked message not resent yet
  drop ID...     delete parked rows (asks nothing; prints what it
                 dropped). Drop a row parked for every sink only once the
                 relay went past it: the relay looks it up to go past it.
                 Dropping the first message of a held key resends the
                 key's other parked messages in order and releases it.

ID is a message id, or a position for a row without a readable id: an
LSN (0/16B3748) names every row at it, LSN:N the row N of a multi-row
insert (COPY writes many rows at one LSN: 0/16B3748:2 is the third); list
prints both. An id names every row of that message (one per sink that
refused it); --sink narrows to one sink. A running relay is no
obstacle: resend publishes on connections of its own; but a file sink's
file is the relay's while it runs (its lock): resend to it fails at once,
changing nothing, saying to release from the relay's console
(http.console, which writes through the relay's own sinks) or to stop
the relay first. The table needs the
current columns (resent_at, seq): cdc init adds them after an upgrade.
With log.format: json set (in the file or CDC_LOG_FORMAT), its log and
errors on stderr are JSON records; list, show and resend report on stdout.`

var deadLetterExits = []string{"0  done (resend: every message delivered)",
	"1  a runtime error, an ID that names no parked row, a resend that failed (each reported), or a table made by an older walpost (run cdc init)", usageExit}

var deadLetterSubs = map[string]struct{ minArgs, maxArgs int }{
	"list": {0, 0}, "show": {1, -1}, "resend": {0, -1}, "drop": {1, -1},
}

func checkDeadLetter(o *options) error {
	if len(o.args) == 0 {
		return errors.New("give a subcommand: list, show, resend or drop")
	}
	sub, ids := o.args[0], o.args[1:]
	n, ok := deadLetterSubs[sub]
	switch {
	case !ok:
		return fmt.Errorf("unknown subcommand %q: list, show, resend or drop", sub)
	case o.all && sub != "resend":
		return fmt.Errorf("--all is for resend, not %s", sub)
	case len(ids) < n.minArgs:
		return fmt.Errorf("%s: give the IDs (message ids or LSNs, as list prints them)", sub)
	case n.maxArgs == 0 && len(ids) > 0:
		return fmt.Errorf("%s takes no arguments; got %s", sub, quoteAll(ids))
	case sub == "resend" && o.all == (len(ids) > 0):
		return errors.New("resend: give the IDs, or --all")
	case o.json && sub != "list" && sub != "show":
		return fmt.Errorf("--json is for list and show, not %s", sub)
	}
	return nil
}

// deadLetterCmd is cdc dead-letter.
func deadLetterCmd(e *cmdEnv) error {
	sub, ids := e.opts.args[0], e.opts.args[1:]
	room, err := ops.Open(e.ctx, e.cfg, ops.Options{Log: e.log})
	if err != nil {
		return err
	}
	defer room.Close()
	sel := ops.Filter{IDs: ids, Sink: e.opts.sink, Unsent: e.opts.all}
	switch sub {
	case "list", "show":
		msgs, err := room.Parked(e.ctx, sel)
		if err != nil && !errors.Is(err, ops.ErrNotFound) {
			return err
		}
		switch {
		case e.opts.json:
			if msgs == nil {
				msgs = []ops.Message{}
			}
			if err := ops.WriteJSON(e.stdout, msgs); err != nil {
				return err
			}
		case sub == "list":
			if err := ops.WriteList(e.stdout, msgs); err != nil {
				return err
			}
		default:
			ops.WriteShow(e.stdout, msgs)
		}
		return err
	}
	res, err := room.Act(e.ctx, ops.Action{Kind: ops.Kind(sub), Select: sel}, func(o ops.Outcome) { reportOutcome(e, o) })
	if err != nil && !errors.Is(err, ops.ErrNotFound) {
		return err
	}
	for _, k := range res.Released {
		_, key, _ := strings.Cut(k, "|")
		fmt.Fprintf(e.stdout, "key %q released\n", key)
	}
	switch {
	case res.Failed > 0 && sub == "drop":
		return fmt.Errorf("%d message(s) of held keys were not resent or dropped (reported above); their keys are still held", res.Failed)
	case res.Failed > 0:
		return fmt.Errorf("%d of %d messages were not resent (reported above); they stay parked, not marked resent", res.Failed, res.Selected)
	case res.Selected == 0 && e.opts.all:
		fmt.Fprintln(e.stdout, "nothing to resend: every parked message was resent already")
	}
	return err
}

// reportOutcome prints what an action did with one parked row.
func reportOutcome(e *cmdEnv, o ops.Outcome) {
	switch o.Result {
	case "dropped":
		fmt.Fprintf(e.stdout, "dropped %s (lsn %s, %s)\n", o.Name(), o.At, ops.SinkPhrase(o.Sink))
	case "failed":
		fmt.Fprintf(e.stdout, "failed  %s (lsn %s, %s): %s\n", o.Name(), o.At, ops.SinkPhrase(o.Sink), o.Error)
	default:
		to := strings.Join(o.Sinks, ", ")
		if to == "" {
			to = "no sink (none routes it)"
		}
		fmt.Fprintf(e.stdout, "resent  %s (lsn %s) to %s\n", o.Name(), o.At, to)
	}
}
