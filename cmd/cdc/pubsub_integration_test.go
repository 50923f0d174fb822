package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gps "cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/pubsub"
	"github.com/walpost/walpost/internal/relaytest"
	"github.com/walpost/walpost/internal/tcpproxy"
)

const pubsubProject = "walpost-test"

// pubsubThrottle answers the next n Publish requests with
// ResourceExhausted, as Pub/Sub does over a quota.
type pubsubThrottle struct{ n, answered atomic.Int32 }

func (r *pubsubThrottle) React(any) (bool, any, error) {
	if r.n.Add(-1) >= 0 {
		r.answered.Add(1)
		return true, nil, status.Error(codes.ResourceExhausted, "quota exceeded (the test's)")
	}
	return false, nil, nil
}

// startPstest starts the Pub/Sub module's in-process fake with topics
// and a throttle on Publish.
func startPstest(t *testing.T, topics ...string) (*pstest.Server, *pubsubThrottle) {
	t.Helper()
	th := &pubsubThrottle{}
	srv := pstest.NewServer(pstest.ServerReactorOption{FuncName: "Publish", Reactor: th})
	t.Cleanup(func() { srv.Close() })
	c, err := gps.NewClient(context.Background(), pubsubProject, option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())), option.WithTelemetryDisabled())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, id := range topics {
		pstestTopic(t, c, id)
	}
	return srv, th
}

func pstestTopic(t *testing.T, c *gps.Client, id string) {
	t.Helper()
	if _, err := c.TopicAdminClient.CreateTopic(context.Background(), &pubsubpb.Topic{Name: "projects/" + pubsubProject + "/topics/" + id}); err != nil {
		t.Fatal(err)
	}
}

// pubsubLines returns what topic holds, in the order stored.
func pubsubLines(srv *pstest.Server, topic string) []relaytest.Line {
	var lines []relaytest.Line
	for _, m := range srv.Messages() {
		if m.Topic == "projects/"+pubsubProject+"/topics/"+topic {
			lines = append(lines, relaytest.Line{ID: m.Attributes[pubsub.AttrID], Type: m.Attributes[pubsub.AttrType]})
		}
	}
	return lines
}

// TestIntegrationPubSubLosesNothingThroughKill9ThrottlingAndACut: one
// slot feeds a file sink and a Pub/Sub topic of pstest reached through a
// proxy, while a producer commits keyed sequences. The relay is killed
// with SIGKILL mid-stream and restarted; then Pub/Sub answers
// ResourceExhausted for a while (the client retries); then the proxy cuts
// every connection and refuses new ones for a while (pstest cannot be
// restarted with its messages: the cut stands for the emulator's
// absence). In the end the topic holds every committed message, per key
// in commit order, the slot passes the last commit and SIGTERM exits 0.
// Duplicates are counted.
func TestIntegrationPubSubLosesNothingThroughKill9ThrottlingAndACut(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	ob := relaytest.NewOutbox(t, url)
	conn := pgtest.Connect(t, url)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	const topic = "walpost-cdc"
	srv, th := startPstest(t, topic)
	proxy, err := tcpproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)

	sinks := strings.Join([]string{
		fmt.Sprintf("  - {name: file, kind: file, path: %q}", out),
		fmt.Sprintf("  - {name: ps, kind: pubsub, project: %s, topic: %s, emulator_host: %q, timeout: 3s}", pubsubProject, topic, proxy.Addr()),
	}, "\n")
	cfg := ob.Config(t, sinks, "relay: {batch_size: 100, shutdown_timeout: 10s, retry_backoff: 200ms}")
	cdcInit(t, cfg)

	var relays []*proc
	logs := func() string {
		var b strings.Builder
		for i, p := range relays {
			fmt.Fprintf(&b, "--- relay %d ---\n%s", i+1, p.Stderr.String())
		}
		return b.String()
	}
	count := func() int { return len(pubsubLines(srv, topic)) }
	waitMore := func(what string, n int) {
		t.Helper()
		target := count() + n
		if !pgtest.WaitFor(30*time.Second, func() bool { return count() >= target }) {
			t.Fatalf("%s: the topic holds %d messages, want %d\n%s", what, count(), target, logs())
		}
	}

	relays = append(relays, startCDC(t, "run", "--config", cfg))
	prod := ob.StartProducer(t, 8, 3*time.Millisecond)
	waitMore("getting going", 300)
	relays[0].Kill9(t)
	atKill := count()
	relays = append(relays, startCDC(t, "run", "--config", cfg))
	waitMore("after the kill -9", 300)

	th.n.Store(20)
	waitMore("after throttling", 200)

	proxy.Cut()
	held := settledCount(count)
	time.Sleep(1500 * time.Millisecond)
	if got := count(); got != held {
		t.Errorf("the topic took %d messages while its proxy was cut", got-held)
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	waitMore("after the cut", 200)
	prod.Stop()
	committed := prod.Committed(t, conn)

	if !pgtest.WaitFor(60*time.Second, func() bool { return relaytest.AllDelivered(committed, pubsubLines(srv, topic)) }) {
		t.Fatalf("the topic misses committed messages after 60 s (%d of %d)\n%s", count(), len(committed), logs())
	}
	var last string
	for _, l := range relaytest.ReadLines(t, out) {
		last = l.CommitLSN
	}
	lastLSN := relaytest.ParseLSN(t, last)
	if !pgtest.WaitFor(15*time.Second, func() bool { return relaytest.SlotConfirmed(t, conn, ob.Slot) > lastLSN }) {
		t.Fatalf("every sink has every message, but the slot stays at %s, not past the last commit %s\n%s",
			relaytest.SlotConfirmed(t, conn, ob.Slot), lastLSN, logs())
	}
	relays[len(relays)-1].Stop(t)
	rep := relaytest.CheckDelivered(t, "pubsub", committed, pubsubLines(srv, topic))
	file := relaytest.CheckDelivered(t, "file", committed, relaytest.ReadLines(t, out))
	t.Logf("%d messages committed over 8 keys; %d on the topic at the kill -9; %d throttled answers; duplicates: pubsub %d, file %d",
		len(committed), atKill, th.answered.Load(), rep.Duplicates, file.Duplicates)
	if th.answered.Load() == 0 {
		t.Error("no publish request was throttled")
	}
}

// pubsubTemplated: topic "{type}" on a pstest of the test's own, which
// has the topic "ok"; create adds "missing".
func pubsubTemplated(t *testing.T) *templatedBroker {
	const okTopic, missingTopic = "tpl-" + typeOK, "tpl-" + typeMissing
	srv, _ := startPstest(t, okTopic)
	c, err := gps.NewClient(context.Background(), pubsubProject, option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())), option.WithTelemetryDisabled())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var mu sync.Mutex
	topics := []string{okTopic}
	return &templatedBroker{
		sink:        fmt.Sprintf("{name: s, kind: pubsub, project: %s, topic: %q, emulator_host: %q, timeout: 5s}", pubsubProject, "tpl-{type}", srv.Addr),
		missing:     missingTopic,
		says:        []string{"does not exist"},
		perKeyOrder: true,
		create: func(t *testing.T) {
			pstestTopic(t, c, missingTopic)
			mu.Lock()
			topics = append(topics, missingTopic)
			mu.Unlock()
		},
		received: func(t *testing.T) []arrival {
			mu.Lock()
			defer mu.Unlock()
			var out []arrival
			for _, tp := range topics {
				for _, l := range pubsubLines(srv, tp) {
					out = append(out, arrival{strings.TrimPrefix(tp, "tpl-"), l.ID})
				}
			}
			return firstCopies(out)
		},
	}
}

// TestIntegrationPubSubQuickStartDelivers runs the quick start of
// docs/sinks/pubsub.md as a reader does, against pstest on a port of the
// test's own (the only change), with the README's first config and its
// INSERT: the topic then holds the message with ordering key order-1, id,
// type and key attributes and the payload as data.
func TestIntegrationPubSubQuickStartDelivers(t *testing.T) {
	doc := section(t, readDoc(t, "docs/sinks/pubsub.md"), "## Quick start (against pstest)")
	shs, ymls := fenced(doc, "sh"), fenced(doc, "yaml")
	if len(shs) != 1 || len(ymls) != 1 {
		t.Fatalf("docs/sinks/pubsub.md, quick start: want one sh and one yaml block, got %d and %d", len(shs), len(ymls))
	}
	flags := regexp.MustCompile(`go run ./tools/pubsubfake -listen (\S+) -project (\S+) -topics (\S+) -print &`).FindStringSubmatch(shs[0])
	if flags == nil {
		t.Fatalf("the quick start's command changed: update this test\n%s", shs[0])
	}
	if !strings.Contains(ymls[0], "emulator_host: "+flags[1]+"\n") || !strings.Contains(ymls[0], "project: "+flags[2]+"\n") {
		t.Fatalf("the quick start's config does not point at the fake's %s and project %s\n%s", flags[1], flags[2], ymls[0])
	}
	srv := pstest.NewServer()
	t.Cleanup(func() { srv.Close() })
	c, err := gps.NewClient(context.Background(), flags[2], option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())), option.WithTelemetryDisabled())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	topic := "projects/" + flags[2] + "/topics/" + flags[3]
	if _, err := c.TopicAdminClient.CreateTopic(context.Background(), &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	sinks := strings.Replace(ymls[0], "emulator_host: "+flags[1], "emulator_host: "+srv.Addr, 1)

	fu := firstUse(t)
	db := freshDatabase(t)
	_, p := runReadmeConfig(t, withSinks(t, withURL(t, fu.config, db), sinks))
	pgtest.Exec(t, db, fu.sql)
	pgtest.Await(t, 30*time.Second, "the README's INSERT in "+topic, func() bool { return len(srv.Messages()) >= 1 })
	p.Stop(t)
	msgs := srv.Messages()
	m := msgs[0]
	if len(msgs) != 1 || m.Topic != topic || m.OrderingKey != "order-1" || string(m.Data) != `{"total": 42}` ||
		m.Attributes[pubsub.AttrType] != "order.created" || m.Attributes[pubsub.AttrKey] != "order-1" || m.Attributes[pubsub.AttrID] == "" {
		t.Fatalf("want one message with ordering key order-1 and the README's payload, got %d: %+v", len(msgs), msgs)
	}
}
