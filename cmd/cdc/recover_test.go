package main

import (
	"strings"
	"testing"
	"time"
)

// TestRecoverSinceIsADurationOrATimestamp: --since takes a duration back
// from now or a timestamp (UTC without a zone); anything else, a
// duration of 0 or less and a negative --margin are usage errors (exit 2).
func TestRecoverSinceIsADurationOrATimestamp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		since string
		ago   time.Duration
		at    time.Time
	}{
		{"24h", 24 * time.Hour, time.Time{}},
		{"90m", 90 * time.Minute, time.Time{}},
		{"2026-01-02T15:04:05Z", 0, time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)},
		{"2026-01-02T15:04:05+01:00", 0, time.Date(2026, 1, 2, 14, 4, 5, 0, time.UTC)},
		{"2026-01-02 15:04:05", 0, time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)},
		{"2026-01-02", 0, time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)},
	} {
		o, err := lookup("recover").parse([]string{"--since", c.since, "cdc.yaml"})
		if err != nil {
			t.Errorf("--since %s: %v", c.since, err)
			continue
		}
		if o.recover.SinceAgo != c.ago || !o.recover.Since.Equal(c.at) || o.recover.Margin != 5*time.Minute {
			t.Errorf("--since %s: ago %v, at %v, margin %v", c.since, o.recover.SinceAgo, o.recover.Since, o.recover.Margin)
		}
	}
	for _, args := range [][]string{{"--since", "yesterday"}, {"--since", "0s"}, {"--since", "-1h"}, {"--margin", "-1m"}} {
		code, stdout, stderr := cdc(t, nil, append([]string{"recover"}, args...)...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, args[0]+" "+args[1]) {
			t.Errorf("cdc recover %s: exit %d, want 2 naming the flag\n%s", strings.Join(args, " "), code, stderr)
		}
	}
}
