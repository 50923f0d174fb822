package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/walpost/walpost/internal/replay"
	"github.com/walpost/walpost/internal/store"
)

func deadLetterCommand() *command {
	return &command{name: "dead-letter", trusts: true, summary: "list | show ID | resend ID… | resend --all | drop ID…: the parked messages",
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
changing nothing, saying to stop the relay first. The table needs the
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
	dl, err := replay.OpenDeadLetters(e.ctx, e.cfg)
	if err != nil {
		return err
	}
	defer dl.Close()
	parked, missing, err := dl.List(e.ctx, store.ParkedFilter{IDs: ids, Sink: e.opts.sink, Unsent: e.opts.all})
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		return printParked(e.stdout, parked, e.opts.json)
	case "show":
		if err := showParked(e.stdout, parked, e.opts.json); err != nil {
			return err
		}
	case "resend":
		if err := resendParked(e, parked); err != nil {
			return err
		}
	case "drop":
		for i := range parked {
			p := &parked[i]
			if p.Held() {
				if err := dropHead(e, p); err != nil {
					return err
				}
				continue
			}
			ok, err := dl.Drop(e.ctx, p)
			if err != nil {
				return err
			}
			if ok {
				fmt.Fprintf(e.stdout, "dropped %s (lsn %s, sink %s)\n", p.Name(), p.At(), sinkLabel(p.Sink))
			}
		}
	}
	if len(missing) > 0 {
		return dl.NotFound(missing)
	}
	return nil
}

// dropHead drops p, the parked message a key is held behind, and resends
// the key's other parked messages in order (replay.Release).
func dropHead(e *cmdEnv, p *store.Parked) error {
	dropped := true
	failed, err := replay.Release(e.ctx, e.cfg, *p, e.log, func(o replay.Outcome) {
		if o.Parked.LSN == p.LSN && o.Parked.Seq == p.Seq && o.Parked.Sink == p.Sink {
			dropped = false // not the head: the outcome says which is
		}
		reportResent(e, o)
	})
	if err != nil {
		return err
	}
	if dropped {
		fmt.Fprintf(e.stdout, "dropped %s (lsn %s, sink %s)\n", p.Name(), p.At(), sinkLabel(p.Sink))
	}
	if dropped && failed == 0 {
		fmt.Fprintf(e.stdout, "key %q released\n", p.HoldKey)
	}
	if failed > 0 {
		return fmt.Errorf("key %q is still held: %d message(s) were not resent or dropped (reported above)", p.HoldKey, failed)
	}
	return nil
}

// reportResent prints one resend outcome.
func reportResent(e *cmdEnv, o replay.Outcome) {
	to := strings.Join(o.Sinks, ", ")
	if to == "" {
		to = "no sink (none routes it)"
	}
	if o.Err != nil {
		fmt.Fprintf(e.stdout, "failed  %s (lsn %s, sink %s): %v\n", o.Parked.Name(), o.Parked.At(), sinkLabel(o.Parked.Sink), o.Err)
		return
	}
	fmt.Fprintf(e.stdout, "resent  %s (lsn %s) to %s\n", o.Parked.Name(), o.Parked.At(), to)
}

// resendParked resends parked and reports each outcome.
func resendParked(e *cmdEnv, parked []store.Parked) error {
	failed, err := replay.Resend(e.ctx, e.cfg, parked, e.log, func(o replay.Outcome) {
		reportResent(e, o)
	})
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d messages were not resent (reported above); they stay parked, not marked resent", failed, len(parked))
	}
	if len(parked) == 0 && e.opts.all {
		fmt.Fprintln(e.stdout, "nothing to resend: every parked message was resent already")
	}
	return nil
}

func sinkLabel(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// parkedJSON is a parked row in --json output.
type parkedJSON struct {
	ID        *string         `json:"id"`
	LSN       string          `json:"lsn"`
	Seq       uint32          `json:"seq"`
	CommitLSN string          `json:"commit_lsn"`
	Sink      string          `json:"sink"`
	ParkedAt  time.Time       `json:"parked_at"`
	ResentAt  *time.Time      `json:"resent_at"`
	Error     string          `json:"error"`
	RowData   json.RawMessage `json:"row_data"`
	// HoldKey and HeldBehind: relay.on_invalid or on_refused: hold_key.
	HoldKey    *string `json:"hold_key,omitempty"`
	HeldBehind *string `json:"held_behind,omitempty"`
}

func writeJSON(w io.Writer, parked []store.Parked) error {
	out := make([]parkedJSON, len(parked))
	for i, p := range parked {
		out[i] = parkedJSON{LSN: p.LSN.String(), Seq: p.Seq, CommitLSN: p.CommitLSN.String(), Sink: p.Sink, ParkedAt: p.ParkedAt.UTC(), Error: p.Error, RowData: p.RowData}
		if p.ID != "" {
			out[i].ID = &parked[i].ID
		}
		if !p.ResentAt.IsZero() {
			r := p.ResentAt.UTC()
			out[i].ResentAt = &r
		}
		if p.HoldKey != "" {
			out[i].HoldKey = &parked[i].HoldKey
		}
		if p.HeldBehind != "" {
			out[i].HeldBehind = &parked[i].HeldBehind
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// printParked prints the list table (or JSON).
func printParked(w io.Writer, parked []store.Parked, asJSON bool) error {
	if asJSON {
		return writeJSON(w, parked)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLSN\tSINK\tPARKED_AT\tRESENT_AT\tERROR")
	unmapped, held := false, false
	for _, p := range parked {
		held = held || p.Held()
		id := p.ID
		if id == "" {
			id = "-"
		}
		unmapped = unmapped || p.Sink == ""
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", id, p.At(), sinkLabel(p.Sink), p.ParkedAt.UTC().Format(time.RFC3339), timeLabel(p.ResentAt), excerpt(p.Error, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if unmapped {
		fmt.Fprintln(w, "sink -: a row that could not be mapped, parked for every sink (resend decodes it again and sends it to each sink that routes it)")
	}
	if held {
		fmt.Fprintln(w, "held: a key is held behind its first parked message (relay.on_invalid or on_refused: hold_key); resend or drop that one and the key's other messages follow in order")
	}
	if len(parked) == 0 {
		fmt.Fprintln(w, "(no parked messages)")
	}
	return nil
}

func timeLabel(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// excerpt is s's first line, cut to n characters.
func excerpt(s string, n int) string {
	s, _, cut := strings.Cut(s, "\n")
	if utf8.RuneCountInString(s) > n {
		s, cut = string([]rune(s)[:n]), true
	}
	if cut {
		s += "…"
	}
	return s
}

// showParked prints each parked row in full.
func showParked(w io.Writer, parked []store.Parked, asJSON bool) error {
	if asJSON {
		return writeJSON(w, parked)
	}
	for i, p := range parked {
		if i > 0 {
			fmt.Fprintln(w)
		}
		id, sink := p.ID, p.Sink
		if id == "" {
			id = "- (no readable id)"
		}
		if sink == "" {
			sink = "- (could not be mapped: parked for every sink)"
		}
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, p.RowData, "  ", "  "); err != nil {
			pretty.Reset()
			pretty.Write(p.RowData)
		}
		fmt.Fprintf(w, "id:          %s\nlsn:         %s\ncommit_lsn:  %s\nsink:        %s\nparked_at:   %s\nresent_at:   %s\nerror:       %s\n",
			id, p.At(), p.CommitLSN, sink, p.ParkedAt.UTC().Format(time.RFC3339Nano), timeLabel(p.ResentAt), p.Error)
		if p.HoldKey != "" {
			fmt.Fprintf(w, "hold_key:    %s\n", p.HoldKey)
		}
		if p.HeldBehind != "" {
			fmt.Fprintf(w, "held_behind: %s\n", p.HeldBehind)
		}
		fmt.Fprintf(w, "row_data:\n  %s\n", pretty.String())
	}
	return nil
}
