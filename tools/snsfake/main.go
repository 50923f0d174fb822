// Command snsfake runs the SNS stand-in of walpost's tests
// (internal/publish/sns/snsfake) as a server, for the quick start of
// docs/sinks/sns.md: it creates the topics named, listens, and with
// -print writes every message published as a JSON line to stdout. It
// keeps its topics in memory, has no subscriptions and checks no
// signature: a stand-in for trying the sink out, not SNS.
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

	"github.com/walpost/walpost/internal/publish/sns/snsfake"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9911", "address to listen on")
	topics := flag.String("topics", "outbox.fifo", "topics to create, comma-separated (a name ending in .fifo is a FIFO topic)")
	print := flag.Bool("print", false, "print every message published, as a JSON line")
	flag.Parse()

	srv := snsfake.New()
	if err := srv.Listen(*listen); err != nil {
		fmt.Fprintln(os.Stderr, "snsfake:", err)
		os.Exit(1)
	}
	var names []string
	for _, t := range strings.Split(*topics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			fmt.Fprintf(os.Stderr, "snsfake: topic %s\n", srv.CreateTopic(t))
			names = append(names, t)
		}
	}
	fmt.Fprintf(os.Stderr, "snsfake: listening on %s (endpoint: %s)\n", *listen, srv.URL())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	seen := map[string]int{}
	enc := json.NewEncoder(os.Stdout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-sig:
			srv.Stop()
			return
		case <-tick.C:
		}
		if !*print {
			continue
		}
		for _, t := range names {
			msgs := srv.Messages(t)
			for _, m := range msgs[min(seen[t], len(msgs)):] {
				enc.Encode(map[string]any{"topic": t, "group": m.GroupID, "message": m.Body, "attributes": m.Attributes})
			}
			seen[t] = len(msgs)
		}
	}
}
