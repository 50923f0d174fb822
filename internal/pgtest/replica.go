package pgtest

import (
	"fmt"
	"os"
	"path/filepath"
)

// StartReplica makes a physical replica of c (pg_basebackup -R -X stream,
// or, where c's programs have no pg_basebackup, copyBackup: it streams
// from c, without c's replication slots, which a base backup never copies)
// in a new temporary directory, on a free port, and starts it in
// recovery. The caller closes it.
func (c *Cluster) StartReplica() (*Cluster, error) {
	dir, err := os.MkdirTemp("", "walpost-pg-replica-")
	if err != nil {
		return nil, err
	}
	r := &Cluster{Dir: dir, bin: c.bin, cred: c.cred}
	fail := func(err error) (*Cluster, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	if r.cred != nil {
		if err := os.Chown(dir, int(r.cred.Uid), int(r.cred.Gid)); err != nil {
			return fail(err)
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fail(err)
	}
	if r.Port, err = FreePort(); err != nil {
		return fail(err)
	}
	if _, err := os.Stat(c.Bin("pg_basebackup")); err == nil {
		if out, err := r.run("pg_basebackup", "-D", r.dataDir(), "-R", "-X", "stream", "-c", "fast", "--no-sync",
			"-h", "127.0.0.1", "-p", fmt.Sprint(c.Port), "-U", "postgres"); err != nil {
			return fail(fmt.Errorf("pgtest: pg_basebackup: %v\n%s", err, out))
		}
	} else if err := c.copyBackup(r); err != nil {
		// The npm package of a version (BinFor) has no client programs.
		return fail(err)
	}
	// The primary's settings came with the backup; later lines win.
	f, err := os.OpenFile(filepath.Join(r.dataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fail(err)
	}
	_, err = fmt.Fprintf(f, "\n# pgtest replica\nport = %d\nunix_socket_directories = '%s'\nhot_standby = on\n", r.Port, dir)
	f.Close()
	if err != nil {
		return fail(err)
	}
	if err := r.Start(); err != nil {
		return fail(err)
	}
	return r, nil
}

// Promote ends the recovery of a replica (pg_ctl promote) and waits until
// it accepts writes.
func (c *Cluster) Promote() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if out, err := c.run("pg_ctl", "promote", "-w", "-t", "60", "-D", c.dataDir()); err != nil {
		return fmt.Errorf("pgtest: pg_ctl promote: %v\n%s", err, out)
	}
	return nil
}
