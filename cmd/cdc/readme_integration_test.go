package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
	"github.com/walpost/walpost/internal/relaytest"
)

// readmeConfig returns the YAML block under "### Configuration" in the
// README.
func readmeConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "### Configuration\n\n```yaml\n")
	block, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatal("README.md has no ```yaml block under ### Configuration")
	}
	return block
}

// TestIntegrationReadmeKafkaExampleDelivers runs the README's
// configuration as written, with only where things are replaced (the
// database URL, the broker's and the HTTP port): cdc init, cdc run, and
// every message routed to Kafka reaches its topic on a broker that
// creates topics (as the compose file's does), every message the file.
// (The other types' topics are never created: the route keeps them out.)
func TestIntegrationReadmeKafkaExampleDelivers(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	kc := kafkatest.Start(t, kfake.AllowAutoTopicCreation())
	y := readmeConfig(t)
	for _, r := range []struct{ re, with string }{
		{`(?m)^  url: .*$`, "  url: " + url},
		{`(?m)^  table: public\.outbox `, "  table: " + ob.Table + " "},
		{`(?m)^  publication: walpost_outbox `, "  publication: " + ob.Publication + " "},
		{`(?m)^  slot: walpost_outbox `, "  slot: " + ob.Slot + " "},
		{`"127\.0\.0\.1:9092"`, `"` + kc.Addrs()[0] + `"`},
		{`127\.0\.0\.1:9187`, "127.0.0.1:0"},
		{`(?m)^  progress_table: public\.walpost_sink_progress `, "  progress_table: public." + ob.Slot + "_progress "},
		{`(?m)^  dead_letter_table: public\.walpost_dead_letter `, "  dead_letter_table: public." + ob.Slot + "_dlq "},
	} {
		re := regexp.MustCompile(r.re)
		if !re.MatchString(y) {
			t.Fatalf("the README's configuration no longer matches %s: update this test with it", r.re)
		}
		y = re.ReplaceAllString(y, r.with)
	}
	t.Cleanup(func() {
		pgtest.Exec(t, url, "DROP TABLE IF EXISTS public."+ob.Slot+"_progress", "DROP TABLE IF EXISTS public."+ob.Slot+"_dlq")
	})
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cdc.yaml")
	writeFile(t, cfg, y)
	cdc := relaytest.BuildCDC(t)
	if code, out, errOut := relaytest.Run(t, cdc, nil, "init", "--config", cfg); code != 0 {
		t.Fatalf("cdc init exited %d\n%s%s", code, out, errOut)
	}
	p := relaytest.StartCDCIn(t, dir, cdc, nil, "run", "--config", cfg)

	conn := pgtest.Connect(t, url)
	var all []relaytest.Msg
	for i := range 3 {
		all = append(all, relaytest.NewMsg("order.created", "order-1", i))
	}
	all = append(all, relaytest.NewMsg("order.internal.audit", "order-1", 3), relaytest.NewMsg("invoice.paid", "inv-1", 4))
	for _, m := range all {
		ob.InsertTx(t, conn, m)
	}
	relaytest.WaitAllDelivered(t, filepath.Join(dir, "out", "messages.jsonl"), all, 30*time.Second, p.Stderr.String)
	var recs int
	pgtest.Await(t, 30*time.Second, "3 records in topic outbox.order.created", func() bool {
		if kc.PartitionInfos("outbox.order.created") == nil {
			return false // not created yet: the sink may still be on its way
		}
		recs = len(kc.ReadAll(t, "outbox.order.created"))
		return recs >= 3
	})
	p.Stop(t)
	if n := len(kc.ReadAll(t, "outbox.order.created")); n != 3 {
		t.Fatalf("%d records in outbox.order.created, want 3", n)
	}
}
