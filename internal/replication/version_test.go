package replication

import "testing"

// TestParseServerVersionReadsEveryForm: the version every check compares
// comes from server_version_num when the server gives it, else from
// server_version in each form PostgreSQL writes it (a release with its
// packager's suffix, a beta, before 10's three parts); nothing readable is
// an error, never 0 taken for a version.
func TestParseServerVersionReadsEveryForm(t *testing.T) {
	for _, c := range []struct {
		num, version string
		want         int
	}{
		{"150004", "15.4 (Debian 15.4-1.pgdg120+1)", 150004},
		{"", "15.4 (Debian 15.4-1.pgdg120+1)", 150004},
		{"", "17.2", 170002},
		{"", "17beta1", 170000},
		{"", "18devel", 180000},
		{"", "9.6.24", 90624},
		{"", "14.10 (Ubuntu 14.10-0ubuntu0.22.04.1)", 140010},
	} {
		if got, err := parseServerVersion(c.num, c.version); err != nil || got != c.want {
			t.Errorf("parseServerVersion(%q, %q) = %d, %v; want %d", c.num, c.version, got, err, c.want)
		}
	}
	for _, c := range [][2]string{{"", ""}, {"", "devel"}, {"x", "PostgreSQL"}} {
		if got, err := parseServerVersion(c[0], c[1]); err == nil {
			t.Errorf("parseServerVersion(%q, %q) = %d, want an error", c[0], c[1], got)
		}
	}
}
