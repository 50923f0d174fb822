package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
	"github.com/walpost/walpost/internal/relaytest"
)

// The README's first use and broker screens, and the configuration
// reference's example, run as a reader runs them: the cdc binary, the
// config as written (only the database URL, and where the test's broker
// listens, replaced), real PostgreSQL.

// readDoc returns a file of the repository, relative to its root.
func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var fenceRE = regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)^```")

// fenced returns the bodies of the fenced blocks of language lang in s, in
// order.
func fenced(s, lang string) []string {
	var out []string
	for _, m := range fenceRE.FindAllStringSubmatch(s, -1) {
		if m[1] == lang {
			out = append(out, m[2])
		}
	}
	return out
}

// section returns the text of s under heading, up to the next heading of
// the same or a higher level outside a fenced block.
func section(t *testing.T, s, heading string) string {
	t.Helper()
	level := len(heading) - len(strings.TrimLeft(heading, "#"))
	var out []string
	in, fence := false, false
	for _, l := range strings.Split(s, "\n") {
		switch {
		case l == heading:
			in = true
			continue
		case strings.HasPrefix(l, "```"):
			fence = !fence
		case in && !fence && strings.HasPrefix(l, "#"):
			if len(l)-len(strings.TrimLeft(l, "#")) <= level {
				return strings.Join(out, "\n")
			}
		}
		if in {
			out = append(out, l)
		}
	}
	if !in {
		t.Fatalf("no heading %q", heading)
	}
	return strings.Join(out, "\n")
}

// readmeFirstUse is the README's first use: its config, the SQL to try and
// the line the file then holds.
type readmeFirstUse struct{ config, sql, line string }

func firstUse(t *testing.T) readmeFirstUse {
	t.Helper()
	readme := readDoc(t, "README.md")
	s := section(t, readme, "## First use: a file sink")
	cfg, sqls, lines := fenced(s, "yaml"), fenced(s, "sql"), fenced(s, "json")
	if len(cfg) == 0 || len(sqls) == 0 || len(lines) == 0 {
		t.Fatal(`README.md, "First use": want a yaml, a sql and a json block`)
	}
	// The first config comes before the first command that needs it.
	if c, y := strings.Index(readme, "cdc init --config"), strings.Index(readme, "```yaml"); c < y {
		t.Fatalf("README.md runs cdc init --config (byte %d) before it shows a config (byte %d)", c, y)
	}
	if n := strings.Count(strings.TrimSpace(cfg[0]), "\n") + 1; n > 6 {
		t.Fatalf("the README's first config has %d lines; it is meant to be six", n)
	}
	return readmeFirstUse{config: cfg[0], sql: sqls[0], line: lines[0]}
}

// withURL returns cfg with its postgres.url replaced by u.
func withURL(t *testing.T, cfg, u string) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^  url: .*$`)
	if !re.MatchString(cfg) {
		t.Fatal("the README's config has no `  url:` line: update this test with it")
	}
	return re.ReplaceAllLiteralString(cfg, "  url: "+u)
}

// withSinks returns cfg with its sinks: block replaced by sinks, as the
// README's broker screens say to.
func withSinks(t *testing.T, cfg, sinks string) string {
	t.Helper()
	head, _, ok := strings.Cut(cfg, "sinks:\n")
	if !ok || !strings.HasPrefix(sinks, "sinks:\n") {
		t.Fatalf("want a config and a screen that start a sinks: block\n%s\n%s", cfg, sinks)
	}
	return head + sinks
}

// freshDatabase creates a database of the test's own, so that the README's
// configs run with their default names (public.outbox, walpost_outbox).
// The slot (cluster-wide) and the database are dropped when the test ends.
func freshDatabase(t *testing.T) string {
	t.Helper()
	base := pgtest.URL(t)
	name := pgtest.Name(t, "readme")
	pgtest.Exec(t, base, "CREATE DATABASE "+name)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("dropping %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		pgtest.WaitFor(10*time.Second, func() bool {
			_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1", name)
			return err == nil
		})
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping %s: %v", name, err)
		}
	})
	return u.String()
}

// runReadmeConfig writes cfg as cdc.yaml in a directory of its own, runs
// cdc init there and starts cdc run, as the README's first use does.
func runReadmeConfig(t *testing.T, cfg string) (dir string, p *relaytest.Proc) {
	t.Helper()
	dir = t.TempDir()
	writeFile(t, filepath.Join(dir, "cdc.yaml"), cfg)
	cdc := relaytest.BuildCDC(t)
	ini := relaytest.StartCDCIn(t, dir, cdc, nil, "init", "--config", "cdc.yaml")
	if code := ini.Wait(2 * time.Minute); code != 0 {
		t.Fatalf("cdc init exited %d\n%s%s", code, ini.Stdout.String(), ini.Stderr.String())
	}
	return dir, relaytest.StartCDCIn(t, dir, cdc, nil, "run", "--config", "cdc.yaml")
}

// TestIntegrationReadmeFirstUseDeliversTheInsert runs the README's first
// use as written: its six-line file-sink config (only the URL replaced),
// cdc init, cdc run, its INSERT; the file then holds one line, the one
// the README shows, with the id and positions the server gave.
func TestIntegrationReadmeFirstUseDeliversTheInsert(t *testing.T) {
	fu := firstUse(t)
	db := freshDatabase(t)
	dir, p := runReadmeConfig(t, withURL(t, fu.config, db))
	pgtest.Exec(t, db, fu.sql)

	path := filepath.Join(dir, "out", "messages.jsonl")
	pgtest.Await(t, 30*time.Second, "the README's INSERT in "+path, func() bool { return relaytest.CountLines(path) >= 1 })
	p.Stop(t)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, want := fields(t, strings.TrimSpace(string(b))), fields(t, strings.TrimSpace(fu.line))
	if len(got) != len(want) {
		t.Fatalf("the file holds\n%s\nthe README shows\n%s", b, fu.line)
	}
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("field %s: missing from the line the relay wrote", k)
		case k == "id":
			var id string
			if json.Unmarshal(g, &id) != nil || uuid.Validate(id) != nil {
				t.Errorf("id: %s is not a UUID", g)
			}
		case k == "lsn" || k == "commit_lsn":
			var s string
			if json.Unmarshal(g, &s) != nil {
				t.Errorf("%s: %s is not a string", k, g)
			} else if _, err := pglogrepl.ParseLSN(s); err != nil {
				t.Errorf("%s: %s is not an LSN: %v", k, g, err)
			}
		case string(g) != string(w):
			t.Errorf("%s: the relay wrote %s, the README shows %s", k, g, w)
		}
	}
}

// fields parses one JSON line into its fields, each as written.
func fields(t *testing.T, line string) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &m); err != nil || strings.Contains(line, "\n") {
		t.Fatalf("not one JSON line (%v):\n%s", err, line)
	}
	return m
}

// brokerScreens returns the README's broker screens (the yaml blocks of
// "Sending to a broker") by sink kind; a kind's second screen is "kind#2".
func brokerScreens(t *testing.T) map[string]string {
	t.Helper()
	s := section(t, readDoc(t, "README.md"), "## Sending to a broker")
	kindRE := regexp.MustCompile(`(?m)^    kind: (\S+)$`)
	out := map[string]string{}
	for _, b := range fenced(s, "yaml") {
		m := kindRE.FindStringSubmatch(b)
		if m == nil {
			t.Fatalf("a screen without a kind:\n%s", b)
		}
		k := m[1]
		for n := 2; out[k] != ""; n++ { // a second screen of a kind (scheduled delivery)
			k = fmt.Sprintf("%s#%d", m[1], n)
		}
		out[k] = b
	}
	for _, k := range []string{"kafka", "servicebus", "nats", "rabbitmq", "webhook"} {
		if out[k] == "" {
			t.Errorf(`README.md, "Sending to a broker": no %s screen`, k)
		}
	}
	return out
}

// TestIntegrationReadmeBrokerScreensAreValidConfigs puts each broker
// screen of the README in the first config, as the README says, and runs
// cdc status with it: every screen is a valid config (a mistake would exit
// 2 naming the field); the slot does not exist, so status exits 1.
func TestIntegrationReadmeBrokerScreensAreValidConfigs(t *testing.T) {
	fu := firstUse(t)
	db := pgtest.URL(t)
	cdc := relaytest.BuildCDC(t)
	env := []string{
		"SERVICEBUS_CONNECTION_STRING=Endpoint=sb://readme.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey=c2VjcmV0",
		"RABBITMQ_PASSWORD=secret", "HOOK_SIGNING_SECRET=0123456789abcdef0123456789abcdef",
		"AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=https;AccountName=readme;AccountKey=c2VjcmV0;EndpointSuffix=core.windows.net",
	}
	for kind, screen := range brokerScreens(t) {
		t.Run(kind, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "cdc.yaml")
			y := withSinks(t, withURL(t, fu.config, db), screen)
			writeFile(t, cfg, y)
			code, out, errOut := relaytest.Run(t, cdc, env, "status", "--config", cfg)
			if code != 1 || !strings.Contains(errOut+out, "cdc init") {
				t.Fatalf("cdc status with the README's %s screen exited %d, want 1 (no slot yet: run cdc init)\n%s\n%s%s", kind, code, y, out, errOut)
			}
		})
	}
}

// TestIntegrationReadmeKafkaScreenDelivers runs the README's first config
// with its Kafka screen as the sinks (the brokers replaced by an
// in-process broker holding the topic) and its INSERT: the record reaches
// outbox.order.created, keyed by the outbox key.
func TestIntegrationReadmeKafkaScreenDelivers(t *testing.T) {
	fu := firstUse(t)
	screen := brokerScreens(t)["kafka"]
	kc := kafkatest.Start(t, kfake.SeedTopics(1, "outbox.order.created"))
	re := regexp.MustCompile(`(?m)^    brokers: .*$`)
	if !re.MatchString(screen) {
		t.Fatal("the README's Kafka screen has no `    brokers:` line: update this test with it")
	}
	screen = re.ReplaceAllLiteralString(screen, `    brokers: ["`+kc.Addrs()[0]+`"]`)
	db := freshDatabase(t)
	_, p := runReadmeConfig(t, withSinks(t, withURL(t, fu.config, db), screen))
	pgtest.Exec(t, db, fu.sql)
	pgtest.Await(t, 30*time.Second, "the README's INSERT in outbox.order.created", func() bool {
		return len(kc.ReadAll(t, "outbox.order.created")) >= 1
	})
	p.Stop(t)
	recs := kc.ReadAll(t, "outbox.order.created")
	if len(recs) != 1 || string(recs[0].Key) != "order-1" || string(recs[0].Value) != `{"total": 42}` {
		t.Fatalf("want one record keyed order-1 with the README's payload, got %d: %+v", len(recs), recs)
	}
}

// TestIntegrationReadmeConfigurationReferenceDelivers runs the example of
// docs/configuration.md ("Every key in one example"), to which the README
// points for every key, with only where things are replaced (the database
// URL, the object names, the broker's address and the HTTP port): cdc
// init, cdc run, and every message routed to Kafka reaches its topic on a
// broker that creates topics (as the compose file's does), every message
// the file. (The other types' topics are never created: the route keeps
// them out.)
func TestIntegrationReadmeConfigurationReferenceDelivers(t *testing.T) {
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	kc := kafkatest.Start(t, kfake.AllowAutoTopicCreation())
	blocks := fenced(section(t, readDoc(t, "docs/configuration.md"), "## Every key in one example"), "yaml")
	if len(blocks) == 0 {
		t.Fatal(`docs/configuration.md, "Every key in one example": no yaml block`)
	}
	y := blocks[0]
	for _, r := range []struct{ re, with string }{
		{`(?m)^  url: .*$`, "  url: " + url},
		{`(?m)^  table: public\.outbox `, "  table: " + ob.Table + " "},
		{`(?m)^  publication: walpost_outbox `, "  publication: " + ob.Publication + " "},
		{`(?m)^  slot: walpost_outbox `, "  slot: " + ob.Slot + " "},
		{`"127\.0\.0\.1:9092"`, `"` + kc.Addrs()[0] + `"`},
		{`127\.0\.0\.1:9187`, "127.0.0.1:0"},
		{`(?m)^  state_schema: public `, "  state_schema: " + ob.Slot + "_state "},
	} {
		re := regexp.MustCompile(r.re)
		if !re.MatchString(y) {
			t.Fatalf("the configuration reference's example no longer matches %s: update this test with it", r.re)
		}
		y = re.ReplaceAllString(y, r.with)
	}
	pgtest.Exec(t, url, "CREATE SCHEMA "+ob.Slot+"_state")
	t.Cleanup(func() { pgtest.Exec(t, url, "DROP SCHEMA IF EXISTS "+ob.Slot+"_state CASCADE") })
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
