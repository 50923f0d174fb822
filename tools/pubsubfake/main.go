// Command pubsubfake runs pstest, the in-process Pub/Sub fake of
// cloud.google.com/go/pubsub/v2, as a server, for the quick start of
// docs/sinks/pubsub.md: it creates the topics named (in project
// -project), listens, and with -print writes every message published as
// a JSON line to stdout. It keeps everything in memory: a stand-in for
// trying the sink out, not Pub/Sub.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	gps "cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8085", "address to listen on")
	project := flag.String("project", "demo", "project of the topics")
	topics := flag.String("topics", "outbox", "topic IDs to create, comma-separated")
	print := flag.Bool("print", false, "print every message published, as a JSON line")
	flag.Parse()

	srv := pstest.NewServerWithAddress(*listen)
	defer srv.Close()
	c, err := gps.NewClient(context.Background(), *project, option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())), option.WithTelemetryDisabled())
	if err != nil {
		fmt.Fprintln(os.Stderr, "pubsubfake:", err)
		os.Exit(1)
	}
	for _, t := range strings.Split(*topics, ",") {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		name := "projects/" + *project + "/topics/" + t
		if _, err := c.TopicAdminClient.CreateTopic(context.Background(), &pubsubpb.Topic{Name: name}); err != nil {
			fmt.Fprintln(os.Stderr, "pubsubfake:", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "pubsubfake: topic %s\n", name)
	}
	fmt.Fprintf(os.Stderr, "pubsubfake: listening on %s (emulator_host: %s)\n", srv.Addr, srv.Addr)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	enc := json.NewEncoder(os.Stdout)
	seen := 0
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-sig:
			return
		case <-tick.C:
		}
		if !*print {
			continue
		}
		msgs := srv.Messages()
		for _, m := range msgs[min(seen, len(msgs)):] {
			enc.Encode(map[string]any{"topic": m.Topic, "ordering_key": m.OrderingKey, "data": string(m.Data), "attributes": m.Attributes})
		}
		seen = len(msgs)
	}
}
