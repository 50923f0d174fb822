package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/publish/kafka"
)

// kafkaProgressTimeout bounds reading one sink's progress topic.
const kafkaProgressTimeout = 15 * time.Second

// kafkaProgressCautions reads the progress topic of every kafka sink with
// exactly_once, as cdc run would at its next start, and returns a caution
// for each progress record it would refuse as forged (docs/security.md,
// "Progress topic"), or for a topic it could not read. walEnd is the
// server's WAL position. Status calls it with Options.CheckProgressTopics
// only (cdc status): the console's status view is polled, and this reads
// a topic from the brokers.
func kafkaProgressCautions(ctx context.Context, cfg *config.Config, walEnd pglogrepl.LSN) []string {
	var out []string
	for i := range cfg.Sinks {
		sc := &cfg.Sinks[i]
		if sc.Kind != "kafka" {
			continue
		}
		ps, err := kafka.New(sc, zerolog.Nop())
		if err != nil {
			continue // cdc run says what is wrong with it
		}
		s, ok := ps.(*kafka.Sink)
		if !ok {
			ps.Close()
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, kafkaProgressTimeout)
		found, err := s.CheckProgress(cctx, cfg.Postgres.Slot, walEnd)
		cancel()
		s.Close()
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			out = append(out, fmt.Sprintf("sink %s: its progress topic could not be read within %s (are the brokers up?): forged progress records not checked", sc.Name, kafkaProgressTimeout))
		case err != nil:
			out = append(out, fmt.Sprintf("sink %s: its progress topic could not be read: %v: forged progress records not checked", sc.Name, err))
		}
		out = append(out, found...)
	}
	return out
}
