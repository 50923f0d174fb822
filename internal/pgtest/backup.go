package pgtest

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// copyBackup makes r's data directory a base backup of c without
// pg_basebackup: PostgreSQL's low-level backup API (pg_backup_start,
// pg_start_backup before 15) around a copy of c's files, the backup_label
// it returns, and the settings pg_basebackup -R writes (standby.signal,
// primary_conninfo). The copy leaves out what a base backup leaves out
// (WAL, replication slots, the postmaster's files, temporary state). The
// replica streams the WAL since the backup's start from c; c keeps it for
// the replica's physical slot, made here and named after r's port.
func (c *Cluster) copyBackup(r *Cluster) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgtest: base backup: %w", err)
	}
	defer conn.Close(context.Background())
	slot := replicaSlot(r)
	r.PrimarySlot = slot
	if _, err := conn.Exec(ctx, "SELECT pg_create_physical_replication_slot($1, true)", slot); err != nil {
		return fmt.Errorf("pgtest: base backup: creating the replica's slot: %w", err)
	}
	start, stop := "SELECT pg_backup_start('pgtest', true)", "SELECT labelfile, spcmapfile FROM pg_backup_stop(true)"
	if c.Major < 15 {
		start, stop = "SELECT pg_start_backup('pgtest', true, false)", "SELECT labelfile, spcmapfile FROM pg_stop_backup(false, true)"
	}
	if _, err := conn.Exec(ctx, start); err != nil {
		return fmt.Errorf("pgtest: base backup: %w", err)
	}
	src, dst := c.dataDir(), r.dataDir()
	if err := copyDataDir(src, dst); err != nil {
		return fmt.Errorf("pgtest: base backup: copying %s: %w", src, err)
	}
	var label, spcmap string
	if err := conn.QueryRow(ctx, stop).Scan(&label, &spcmap); err != nil {
		return fmt.Errorf("pgtest: base backup: %w", err)
	}
	conf := fmt.Sprintf("\n# pgtest base backup\nprimary_conninfo = '%s'\nprimary_slot_name = '%s'\n", c.primaryConninfo(), slot)
	files := map[string]string{"backup_label": label, "standby.signal": ""}
	if spcmap != "" {
		files["tablespace_map"] = spcmap
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dst, name), []byte(body), 0o600); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(filepath.Join(dst, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(conf)
	f.Close()
	if err != nil {
		return err
	}
	if r.cred != nil {
		return filepath.WalkDir(dst, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, int(r.cred.Uid), int(r.cred.Gid))
		})
	}
	return nil
}

// skipContents are the directories whose contents a base backup leaves
// out (the directory itself is kept), skipFiles the files it leaves out.
var (
	skipContents = map[string]bool{"pg_wal": true, "pg_replslot": true, "pg_stat_tmp": true, "pg_dynshmem": true,
		"pg_notify": true, "pg_serial": true, "pg_snapshots": true, "pg_subtrans": true}
	skipFiles = map[string]bool{"postmaster.pid": true, "postmaster.opts": true, "backup_label": true, "tablespace_map": true,
		"pg_internal.init": true, "standby.signal": true, "recovery.signal": true}
)

// copyDataDir copies src to dst as a base backup does; a file that goes
// away while it copies is left out (the WAL replay restores it).
func copyDataDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			if err := os.MkdirAll(to, 0o700); err != nil {
				return err
			}
			if skipContents[rel] {
				if rel == "pg_wal" {
					if err := os.MkdirAll(filepath.Join(to, "archive_status"), 0o700); err != nil {
						return err
					}
				}
				return filepath.SkipDir
			}
			return nil
		}
		if skipFiles[d.Name()] || strings.HasPrefix(d.Name(), "pgsql_tmp") || !d.Type().IsRegular() {
			return nil
		}
		return copyFile(p, to)
	})
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
