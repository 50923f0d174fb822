// Command sqsfake runs the SQS stand-in of walpost's tests
// (internal/publish/sqs/sqsfake) as a server, for the quick start of
// docs/sinks/sqs.md: it creates the queues named, listens, and with
// -print writes every message stored as a JSON line to stdout. It keeps
// its queues in memory only and checks no signature: a stand-in for
// trying the sink out, not an SQS.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/walpost/walpost/internal/publish/sqs/sqsfake"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9324", "address to listen on")
	queues := flag.String("queues", "outbox.fifo", "queues to create, comma-separated (a name ending in .fifo is a FIFO queue)")
	print := flag.Bool("print", false, "print every message stored, as a JSON line")
	flag.Parse()

	srv := sqsfake.New()
	if err := srv.Listen(*listen); err != nil {
		fmt.Fprintln(os.Stderr, "sqsfake:", err)
		os.Exit(1)
	}
	var names []string
	for _, q := range strings.Split(*queues, ",") {
		if q = strings.TrimSpace(q); q != "" {
			fmt.Fprintf(os.Stderr, "sqsfake: queue %s\n", srv.CreateQueue(q, sqsfake.QueueOptions{}))
			names = append(names, q)
		}
	}
	fmt.Fprintf(os.Stderr, "sqsfake: listening on %s (endpoint: %s)\n", *listen, srv.URL())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	seen := map[string]int{}
	enc := json.NewEncoder(os.Stdout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-sig:
			srv.Close()
			return
		case <-tick.C:
		}
		if !*print {
			continue
		}
		for _, q := range names {
			msgs := srv.Messages(q)
			for _, m := range msgs[min(seen[q], len(msgs)):] {
				enc.Encode(map[string]any{"queue": q, "group": m.GroupID, "body": m.Body, "attributes": m.Attributes})
			}
			seen[q] = len(msgs)
		}
	}
}
