package pgtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ReplicaOptions configures StartReplicaWith. The zero value makes the
// replica StartReplica makes.
type ReplicaOptions struct {
	// Settings are extra lines for the replica's postgresql.auto.conf,
	// read after what the base backup wrote there (a later line wins), e.g.
	// "sync_replication_slots = on".
	Settings []string
	// DBName adds dbname=DBName to primary_conninfo: slot synchronization
	// (PostgreSQL 17+, sync_replication_slots) connects to a database.
	DBName string
	// Slot makes the replica stream through a physical slot on the primary,
	// named in PrimarySlot, also where pg_basebackup makes the backup (the
	// copy without pg_basebackup always has one). The slot outlives the
	// replica: the primary keeps WAL for it until it is dropped or the
	// primary is closed.
	Slot bool
}

// StartReplica makes a physical replica of c (pg_basebackup -R -X stream,
// or, where c's programs have no pg_basebackup, copyBackup: it streams
// from c, without c's replication slots, which a base backup never copies)
// in a new temporary directory, on a free port, and starts it in
// recovery. The caller closes it.
func (c *Cluster) StartReplica() (*Cluster, error) {
	return c.StartReplicaWith(ReplicaOptions{})
}

// StartReplicaWith is StartReplica with options: a replica that keeps a
// physical slot on c (Cluster.PrimarySlot) and extra settings, e.g. one
// that synchronizes c's failover slots.
func (c *Cluster) StartReplicaWith(opts ReplicaOptions) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "walpost-pg-replica-")
	if err != nil {
		return nil, err
	}
	r := &Cluster{Dir: dir, bin: c.bin, cred: c.cred, Major: c.Major}
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
		args := []string{"-D", r.dataDir(), "-R", "-X", "stream", "-c", "fast", "--no-sync",
			"-h", "127.0.0.1", "-p", fmt.Sprint(c.Port), "-U", "postgres"}
		if opts.Slot {
			r.PrimarySlot = replicaSlot(r)
			args = append(args, "-C", "-S", r.PrimarySlot)
		}
		if out, err := r.run("pg_basebackup", args...); err != nil {
			return fail(fmt.Errorf("pgtest: pg_basebackup: %v\n%s", err, out))
		}
	} else if err := c.copyBackup(r); err != nil {
		// The npm package of a version (BinFor) has no client programs.
		return fail(err)
	}
	var auto []string
	if opts.DBName != "" {
		auto = append(auto, fmt.Sprintf("primary_conninfo = '%s dbname=%s'", c.primaryConninfo(), opts.DBName))
	}
	auto = append(auto, opts.Settings...)
	if len(auto) > 0 {
		f, err := os.OpenFile(filepath.Join(r.dataDir(), "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return fail(err)
		}
		_, err = f.WriteString("\n# pgtest replica options\n" + strings.Join(auto, "\n") + "\n")
		f.Close()
		if err != nil {
			return fail(err)
		}
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

// replicaSlot names the physical slot on the primary that replica r
// streams through.
func replicaSlot(r *Cluster) string { return fmt.Sprintf("pgtest_replica_%d", r.Port) }

// primaryConninfo is the primary_conninfo of c's replicas, without a
// database.
func (c *Cluster) primaryConninfo() string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=pgtest_replica", c.Port)
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
