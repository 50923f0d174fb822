// Command demo shows walpost end to end on a machine with only Go and
// PostgreSQL's server packages: it starts a throwaway PostgreSQL cluster
// (wal_level=logical) in a temporary directory, writes a config, runs
// `cdc init` and `cdc run` with the stdout sink, and commits sample
// transactions (an order row and its outbox row in one transaction) while
// the relay prints each message as one JSON line.
//
//	go run ./tools/demo [-cdc ./bin/cdc] [-n 10] [-for 0]
//
// It stops on Ctrl-C (or after -for), stopping the relay gracefully and
// removing the cluster.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/outbox"
)

func main() {
	cdc := flag.String("cdc", "./bin/cdc", "path of the cdc binary")
	n := flag.Int("n", 10, "sample transactions to commit (one per second)")
	dur := flag.Duration("for", 0, "stop after this long (0: run until Ctrl-C)")
	flag.Parse()
	restore := takeForeground()
	err := run(*cdc, *n, *dur)
	restore()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// relayExited is the outcome of cdc run ending before the demo asked it
// to: Ctrl-C in a terminal signals the whole process group, so the relay
// may have stopped cleanly (exit 0) before the demo saw the signal.
func relayExited(err error) error {
	if err != nil {
		return fmt.Errorf("cdc run exited: %v", err)
	}
	say("the relay stopped (exit 0)")
	return nil
}

func say(format string, args ...any) { fmt.Fprintf(os.Stderr, "demo: "+format+"\n", args...) }

func run(cdc string, n int, dur time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dur)
		defer cancel()
	}
	say("starting a throwaway PostgreSQL (wal_level=logical)…")
	cl, err := pgtest.Start(pgtest.Options{Fsync: true})
	if err != nil {
		return err
	}
	defer cl.Close()
	url := cl.URL("postgres")
	dir, err := os.MkdirTemp("", "walpost-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfgPath := filepath.Join(dir, "cdc.yaml")
	cfg := fmt.Sprintf(`postgres:
  url: %s
  table: public.outbox
sinks:
  - name: console
    kind: stdout
log: {level: info, format: console}
`, url)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	say("config %s:\n%s", cfgPath, cfg)
	initCmd := exec.CommandContext(ctx, cdc, "init", "--config", cfgPath)
	initCmd.Stdout, initCmd.Stderr = os.Stderr, os.Stderr
	if err := initCmd.Run(); err != nil {
		return fmt.Errorf("cdc init: %w", err)
	}
	relay := exec.Command(cdc, "run", "--config", cfgPath)
	relay.Stdout, relay.Stderr = os.Stdout, os.Stderr
	if err := relay.Start(); err != nil {
		return fmt.Errorf("cdc run: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- relay.Wait() }()

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, customer text, total numeric)`); err != nil {
		return err
	}
	say("committing %d orders, each with its outbox message in the same transaction (Ctrl-C to stop)", n)
	for i := 1; i <= n && ctx.Err() == nil; i++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ($1, $2, $3)`, i, fmt.Sprintf("customer-%d", i%3), 10*i); err != nil {
				return err
			}
			return outbox.Enqueue(ctx, tx, outbox.Message{
				Type:    "order.created",
				Key:     fmt.Sprintf("order-%d", i),
				Payload: map[string]any{"order_id": i, "total": 10 * i},
				Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			})
		})
		if err != nil && ctx.Err() == nil {
			return err
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		case err := <-done:
			return relayExited(err)
		}
	}
	if ctx.Err() == nil {
		say("all %d committed; the relay keeps running (Ctrl-C to stop)", n)
	}
	select {
	case <-ctx.Done():
	case err := <-done:
		return relayExited(err)
	}
	say("stopping the relay (SIGTERM: drain, confirm, exit 0)")
	_ = relay.Process.Signal(syscall.SIGTERM)
	if err := <-done; err != nil {
		return fmt.Errorf("cdc run: %w", err)
	}
	return nil
}
