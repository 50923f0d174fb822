package main

import (
	"strings"
	"testing"
)

// TestReplayAndDeadLetterUsageErrorsExit2: a command line that does not
// name one range, one subcommand with its IDs, or a flag of the
// subcommand is refused with exit 2 before the configuration is read.
func TestReplayAndDeadLetterUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", "--config", "x.yaml"}, "give the rows to replay"},
		{[]string{"replay", "--config", "x.yaml", "--since", "1h", "--from-id", "a"}, "give one"},
		{[]string{"replay", "--config", "x.yaml", "--since", "-1h"}, "positive duration"},
		{[]string{"replay", "--config", "x.yaml", "--since", "1h", "--batch", "0"}, "positive number"},
		{[]string{"dead-letter", "--config", "x.yaml"}, "give a subcommand"},
		{[]string{"dead-letter", "--config", "x.yaml", "purge"}, "unknown subcommand"},
		{[]string{"dead-letter", "--config", "x.yaml", "show"}, "give the IDs"},
		{[]string{"dead-letter", "--config", "x.yaml", "drop"}, "give the IDs"},
		{[]string{"dead-letter", "--config", "x.yaml", "list", "x"}, "takes no arguments"},
		{[]string{"dead-letter", "--config", "x.yaml", "resend"}, "give the IDs, or --all"},
		{[]string{"dead-letter", "--config", "x.yaml", "resend", "--all", "x"}, "give the IDs, or --all"},
		{[]string{"dead-letter", "--config", "x.yaml", "drop", "--all"}, "--all is for resend"},
		{[]string{"dead-letter", "--config", "x.yaml", "drop", "x", "--json"}, "--json is for list and show"},
	} {
		var out, errb strings.Builder
		if code := run(tc.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("cdc %s: exit %d, stderr %q; want 2 and %q", strings.Join(tc.args, " "), code, errb.String(), tc.want)
		}
	}
}
