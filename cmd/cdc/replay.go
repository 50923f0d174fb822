package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/walpost/walpost/internal/replay"
)

// replayOptions are the flags of cdc replay and cdc dead-letter.
type replayOptions struct {
	since        time.Duration // replay --since
	fromID, toID string        // replay --from-id, --to-id
	sink         string        // replay, dead-letter resend/list/show/drop: --sink
	skipRejected bool          // replay --skip-rejected
	batch        int           // replay --batch
	all          bool          // dead-letter resend --all
}

// exitCode is an error with its own exit code.
type exitCode struct {
	error
	code int
}

func (e *exitCode) Unwrap() error { return e.error }

// interruptedExit is cdc replay's exit code when interrupted (128+SIGINT).
const interruptedExit = 130

// usageExitCode is the exit code of a usage or configuration error
// (usageExit).
const usageExitCode = 2

func replayCommand() *command {
	return &command{name: "replay", trusts: true, summary: "--since D | --from-id X --to-id Y: publish the rows still in the outbox table again, in order, with their ids",
		about: replayAbout, exits: replayExits, withConfig: true, logFormat: true, run: replayCmd, check: checkReplay,
		flags: func(fs *flag.FlagSet, o *options) {
			fs.DurationVar(&o.since, "since", 0, "replay the rows of the last `duration` (2h, 30m): by columns.time, else by the time in UUIDv7 ids")
			fs.StringVar(&o.fromID, "from-id", "", "replay from the row with this `id` (included), in replay order")
			fs.StringVar(&o.toID, "to-id", "", "replay up to the row with this `id` (included); default: the last row at the start")
			fs.StringVar(&o.sink, "sink", "", "publish to the sink `name` only (the messages its route takes); default: every sink whose route takes a message")
			fs.BoolVar(&o.skipRejected, "skip-rejected", false, "report a message a sink refuses for good and go on (default: stop there)")
			fs.IntVar(&o.batch, "batch", 500, "how many `rows` are read and published at a time")
		}}
}

const replayAbout = `Publish again the rows still in the outbox table, with their original ids,
to every sink whose route takes them (or to --sink only): receivers drop
the copies by id (the inbox package). Rows go in the order they were
inserted as far as the table tells: by the order column (columns.order,
or the default table's seq) then id; else columns.time (the default
table's created_at) then id; else id (time order for UUIDv7 ids, as the
outbox package writes them). The range is
--since D (rows of the last D: by columns.time, else by the instant a
UUIDv7 id holds; other ids are refused), or --from-id X and/or --to-id Y
(both included); it ends at the last row when replay starts: later rows
are the relay's. Rows whose time column is NULL have no place in that
order and are not replayed.
A table-less outbox (postgres.source: messages) keeps no rows: replay
refuses it (exit 2).

cdc replay reads the table, never the slot: a relay keeps running on the
slot meanwhile, and nothing is marked anywhere, so running it again is
harmless. It reads and publishes --batch rows at a time, retrying a
failing sink as cdc run does; progress (rows done/total, rate) goes to
stderr. A row that cannot be mapped is reported and left out. A message
a sink refuses for good stops replay, or with --skip-rejected is reported
and left out. With log.format: json set (in the file or CDC_LOG_FORMAT),
every line on stderr (progress, reports, errors) is a JSON record. Replayed messages carry lsn and commit_lsn 0/0 (the table
keeps no WAL position) and no commit time.

A file sink is written under an exclusive lock that a running cdc run
holds as long as it has the file open: replay to that file waits until
the relay lets go (it says so on stderr; interrupt to give up). Replay to
a file of its own (another sink in the replay's config) does not wait.

SIGINT or SIGTERM: replay finishes the batch in flight, prints what was
done and how to go on, and exits 130; a second one abandons the batch.`

var replayExits = []string{"0  every row of the range was published to its sinks",
	"1  a runtime error, a message refused (without --skip-rejected), or rows that could not be mapped (reported)",
	usageExit, "130  interrupted (SIGINT/SIGTERM): what was done is printed; run again with the printed --from-id to go on"}

// checkReplay checks that the flags name one range.
func checkReplay(o *options) error {
	switch {
	case o.since == 0 && o.fromID == "" && o.toID == "":
		return errors.New("give the rows to replay: --since D, or --from-id X and/or --to-id Y")
	case o.since != 0 && (o.fromID != "" || o.toID != ""):
		return errors.New("--since and --from-id/--to-id are two ways to give the range; give one")
	case o.since < 0:
		return fmt.Errorf("--since %v: give a positive duration (2h)", o.since)
	case o.batch <= 0:
		return fmt.Errorf("--batch %d: give a positive number of rows", o.batch)
	}
	return nil
}

// replayCmd is cdc replay. The first SIGINT/SIGTERM ends e.ctx (replay
// stops after the batch in flight); the second ends hard, the publishing
// context, and abandons that batch.
func replayCmd(e *cmdEnv) error {
	hard, abandon := context.WithCancel(context.WithoutCancel(e.ctx))
	defer abandon()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		for n := 1; ; n++ {
			select {
			case <-sigs:
			case <-hard.Done():
				return
			}
			if n == 1 {
				fmt.Fprintln(e.stderr, "replay: interrupted: stopping after the batch in flight (interrupt again to abandon it)")
				continue
			}
			abandon()
			return
		}
	}()
	o := e.opts
	res, err := replay.Replay(e.ctx, hard, e.cfg, replay.Options{Since: o.since, FromID: o.fromID, ToID: o.toID, Sink: o.sink,
		SkipRejected: o.skipRejected, Batch: o.batch, Progress: e.stderr, Log: e.log})
	summary := fmt.Sprintf("replayed %d of %d rows: %d messages acknowledged by the sinks", res.Rows, res.Total, res.Deliveries)
	for _, x := range []struct {
		n    int64
		what string
	}{{res.NotRouted, "routed to no sink in use"}, {res.Invalid, "could not be mapped"}, {res.Rejected, "refused (--skip-rejected)"}, {res.Expired, "expired (relay.on_expired)"}} {
		if x.n > 0 {
			summary += fmt.Sprintf(", %d %s", x.n, x.what)
		}
	}
	switch {
	case errors.Is(err, replay.ErrTableLess):
		return &exitCode{err, usageExitCode} // a configuration error: nothing was done
	case errors.Is(err, replay.ErrInterrupted):
		next := "every row of the range was done"
		if res.Next != "" {
			next = fmt.Sprintf("to go on: cdc replay --config %s --from-id %s --to-id %s", e.opts.config, res.Next, res.End)
			if o.sink != "" {
				next += " --sink " + o.sink
			}
		}
		return &exitCode{fmt.Errorf("interrupted: %s (the last: id %s); %s", summary, res.Last, next), interruptedExit}
	case err != nil && hard.Err() == nil && e.ctx.Err() != nil:
		return &exitCode{fmt.Errorf("interrupted before publishing: %w", err), interruptedExit}
	case err != nil && hard.Err() != nil:
		return &exitCode{fmt.Errorf("abandoned the batch in flight (some of it may have gone out; receivers drop copies): %s: %w", summary, err), interruptedExit}
	case err != nil:
		if res.Rows > 0 {
			return fmt.Errorf("%w (%s; the last: id %s)", err, summary, res.Last)
		}
		return err
	}
	fmt.Fprintln(e.stderr, "replay: "+summary)
	return nil
}
