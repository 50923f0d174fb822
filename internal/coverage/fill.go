package coverage

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/decoder"
	"github.com/walpost/walpost/internal/layout"
	"github.com/walpost/walpost/internal/pipeline"
	"github.com/walpost/walpost/internal/replay"
)

// fillBatch is how many rows a fill reads at a time.
const fillBatch = 1000

// gapRows is how the rows of a gap are read: the outbox with timeCol as
// its time column.
func gapRows(ctx context.Context, conn *pgx.Conn, cfg *config.Config, timeCol string) (*replay.Rows, error) {
	t := cfg.Outbox()
	t.Columns[layout.Time] = timeCol
	for _, stmt := range []string{"SET datestyle = 'ISO, MDY'", "SET timezone = 'UTC'", "SET bytea_output = 'hex'"} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return nil, fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return replay.ReadRows(ctx, conn, t)
}

// fill reads the rows whose time is in win from the table, a batch at a
// time in the order they were written as far as the table tells
// (replay.Rows.Sort), and has the pipeline relay those the stream did not
// carry; it returns once every sink acknowledged them.
func (w *Watcher) fill(ctx context.Context, win Window) (relayed, carried int, err error) {
	if w.dec == nil {
		w.dec = decoder.New(w.o.Config.Outbox())
	}
	page := replay.Page{Op: ">", From: win.From, To: win.To, At: true, Limit: fillBatch}
	for {
		raw, err := w.rows.Read(ctx, w.conn, page)
		if err != nil {
			return relayed, carried, fmt.Errorf("reading the rows the stream may not have carried: %w", err)
		}
		rows := make([]pipeline.FillRow, 0, len(raw))
		for _, r := range raw {
			m, err := w.dec.TableRow([]byte(r.Content), 0, 0, r.At)
			var de *decoder.Error
			switch {
			case errors.As(err, &de):
				// relay.on_invalid decides, as for a bad row of the stream.
				rows = append(rows, pipeline.FillRow{Bad: de})
			case err != nil:
				return relayed, carried, fmt.Errorf("mapping row %s of the table, which the stream may not have carried: %w", r.Key.ID(), err)
			default:
				rows = append(rows, pipeline.FillRow{Msg: m})
			}
		}
		if len(rows) > 0 {
			d, err := w.o.Pipeline.Fill(ctx, rows)
			if err != nil {
				return relayed, carried, err
			}
			if err := d.Wait(ctx, w.o.Tracker); err != nil {
				return relayed, carried, err
			}
			relayed += d.Relayed
			carried += d.Carried
		}
		if len(raw) < fillBatch {
			return relayed, carried, nil
		}
		page.After = raw[len(raw)-1].Key
	}
}
