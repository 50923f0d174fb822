package retention

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/layout"
)

// TestDeleteBeforeIsTheEarlierOfKeepAndTheMarkLessMargin: a round deletes
// rows older than keep, and of those only the ones whose time lies margin
// before the mark the slot confirmed, i.e. whose transaction committed
// before the mark (docs/design.md, "Retention").
func TestDeleteBeforeIsTheEarlierOfKeepAndTheMarkLessMargin(t *testing.T) {
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	const keep, margin = 24 * time.Hour, time.Hour
	for _, c := range []struct {
		name   string
		taken  time.Time
		keep   time.Duration
		margin time.Duration
		want   time.Time
	}{
		// The relay keeps up: the mark is recent, keep decides.
		{"recent mark", now.Add(-time.Minute), keep, margin, now.Add(-keep)},
		// The relay is two days behind: the mark decides, not keep.
		{"old mark", now.Add(-48 * time.Hour), keep, margin, now.Add(-49 * time.Hour)},
		// Exactly where both give the same bound.
		{"tie", now.Add(-keep + margin), keep, margin, now.Add(-keep)},
		{"no margin", now.Add(-30 * time.Hour), keep, 0, now.Add(-30 * time.Hour)},
		{"no keep", now.Add(-time.Second), 0, margin, now.Add(-time.Second - margin)},
		// A mark from the server's future (clock set back): keep still
		// bounds it.
		{"mark after now", now.Add(5 * time.Hour), keep, margin, now.Add(-keep)},
		{"sub-second", now.Add(-1500 * time.Millisecond), 0, 250 * time.Millisecond, now.Add(-1750 * time.Millisecond)},
	} {
		got := deleteBefore(now, c.taken, c.keep, c.margin)
		if !got.Equal(c.want) {
			t.Errorf("%s: deleteBefore(now, now%+v, keep %v, margin %v) = now%+v, want now%+v",
				c.name, c.taken.Sub(now), c.keep, c.margin, got.Sub(now), c.want.Sub(now))
		}
		if got.After(now.Add(-c.keep)) || got.After(c.taken.Add(-c.margin)) {
			t.Errorf("%s: bound %v is after now − keep or taken − margin", c.name, got)
		}
	}
}

// TestDeleteStatementDeletesOneBatchOlderThanTheBound: the statement
// deletes by ctid in batches of $2 rows whose time (quoted, as are the
// schema and table) is before $1; a timestamp column compares in UTC, as
// columns.time reads it; with sent_at mapped, only rows marked sent go; a
// column of another type is refused naming the setting.
func TestDeleteStatementDeletesOneBatchOlderThanTheBound(t *testing.T) {
	plain := layout.Table{Schema: "public", Name: "outbox", Columns: layout.Default}
	odd := layout.Table{Schema: "App", Name: `out"box`, Columns: layout.Default}
	odd.Columns[layout.SentAt] = "Sent At"
	for _, c := range []struct {
		name     string
		t        layout.Table
		col, typ string
		want     string
	}{
		{"timestamptz", plain, "created_at", "timestamp with time zone",
			`DELETE FROM "public"."outbox" WHERE ctid = ANY(ARRAY(SELECT ctid FROM "public"."outbox" WHERE "created_at" < $1::timestamptz LIMIT $2))`},
		{"timestamp", plain, "created_at", "timestamp without time zone",
			`DELETE FROM "public"."outbox" WHERE ctid = ANY(ARRAY(SELECT ctid FROM "public"."outbox" WHERE "created_at" < ($1::timestamptz AT TIME ZONE 'UTC') LIMIT $2))`},
		{"quoted names and sent_at", odd, "Occurred", "timestamp with time zone",
			`DELETE FROM "App"."out""box" WHERE ctid = ANY(ARRAY(SELECT ctid FROM "App"."out""box" WHERE "Occurred" < $1::timestamptz AND "Sent At" IS NOT NULL LIMIT $2))`},
	} {
		got, err := deleteStatement(c.t, c.col, c.typ)
		if err != nil || got != c.want {
			t.Errorf("%s:\n got %s (%v)\nwant %s", c.name, got, err, c.want)
		}
	}
	for _, typ := range []string{"date", "text", "bigint", "timestamp(3) with time zone", "time with time zone"} {
		_, err := deleteStatement(plain, "created_at", typ)
		if !errors.Is(err, ErrCheck) || !strings.Contains(err.Error(), "relay.retention.column") || !strings.Contains(err.Error(), typ) {
			t.Errorf("type %s: %v, want ErrCheck naming relay.retention.column and the type", typ, err)
		}
	}
}
