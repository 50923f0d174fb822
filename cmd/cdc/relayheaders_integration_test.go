package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gps "cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/inbox/claims3"
	"github.com/walpost/walpost/inbox/inboxkafka"
	"github.com/walpost/walpost/inbox/inboxnats"
	"github.com/walpost/walpost/inbox/inboxpubsub"
	"github.com/walpost/walpost/inbox/inboxrabbit"
	"github.com/walpost/walpost/inbox/inboxsqs"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/kafka/kafkatest"
	"github.com/walpost/walpost/internal/publish/natsjs/natstest"
	"github.com/walpost/walpost/internal/publish/rabbitmq/rabbittest"
	"github.com/walpost/walpost/internal/publish/sqs/sqsfake"
	"github.com/walpost/walpost/internal/relaytest"
)

// The tests of issue 42: the relay's own headers never come from a row,
// the claim check reaches the effect through every sink kind that takes
// it, a far-future expires_at does not stop a RabbitMQ relay, and a
// console without tokens answers only its own host.

// ccStore is a gofakes3 S3 server with the relay's claim-check bucket
// (walpost-cc) and another bucket, private, holding payroll.json: the
// object a row writer would like a receiver to fetch.
type ccStore struct {
	url     string
	client  *s3.Client
	payroll []byte
}

const ccBucket = "walpost-cc"

func newCCStore(t *testing.T) *ccStore {
	t.Helper()
	backend := s3mem.New()
	for _, b := range []string{ccBucket, "private"} {
		if err := backend.CreateBucket(b); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	creds := credentials.NewStaticCredentialsProvider("AKIDTEST", "walpost-test-secret", "")
	s := &ccStore{url: srv.URL, payroll: []byte(`{"payroll": "secret"}`),
		client: s3.New(s3.Options{Region: "us-east-1", Credentials: creds, BaseEndpoint: aws.String(srv.URL), UsePathStyle: true})}
	if _, err := s.client.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("private"), Key: aws.String("payroll.json"),
		Body: strings.NewReader(string(s.payroll))}); err != nil {
		t.Fatal(err)
	}
	return s
}

// yaml is relay.claim_check on the bucket, storing payloads over 1 KiB.
func (s *ccStore) yaml() string {
	return fmt.Sprintf("{store: s3, bucket: %s, endpoint: %q, path_style: true, region: us-east-1, threshold_bytes: 1024, timeout: 5s}", ccBucket, s.url)
}

// fetcher is the receivers' claims3 fetcher, scoped to the bucket and the
// relay's default prefix.
func (s *ccStore) fetcher() *claims3.Fetcher { return claims3.New(s.client, ccBucket, "walpost/") }

// forgedHeaders are the three claim-check headers naming payroll.json,
// its size and SHA-256 right, as a row writer would set them in the
// headers column of an ordinary message (and the reference again in
// another case).
func (s *ccStore) forgedHeaders() map[string]string {
	sum := sha256.Sum256(s.payroll)
	return map[string]string{"walpost-claim-check": "s3://private/payroll.json", "walpost-claim-check-size": strconv.Itoa(len(s.payroll)),
		"walpost-claim-check-sha256": hex.EncodeToString(sum[:]), "WALPOST-Claim-Check": "s3://private/payroll.json"}
}

// received records what an inbox loop's effect got, by message id.
type received struct {
	mu  sync.Mutex
	got map[string][]byte
}

func (r *received) add(id string, body []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.got == nil {
		r.got = map[string][]byte{}
	}
	r.got[id] = append([]byte(nil), body...)
}

func (r *received) snapshot() map[string][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string][]byte, len(r.got))
	for k, v := range r.got {
		out[k] = v
	}
	return out
}

// wait waits until the effect got every row of rows, and checks that each
// body is the row's payload (compared as JSON: the jsonb column respaces
// it).
func (r *received) wait(t *testing.T, p *proc, rows []relaytest.Msg) {
	t.Helper()
	if !pgtest.WaitFor(60*time.Second, func() bool { return p.Exited() || len(r.snapshot()) >= len(rows) }) || p.Exited() {
		t.Fatalf("the inbox loop received %d of %d messages (relay exited: %v)\n%s", len(r.snapshot()), len(rows), p.Exited(), p.Logs())
	}
	got := r.snapshot()
	for _, row := range rows {
		var want, have any
		if err := json.Unmarshal([]byte(row.Payload), &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got[row.ID], &have); err != nil || !reflect.DeepEqual(want, have) {
			t.Fatalf("message %s: the effect got %d bytes (%.80q), not the row's payload of %d bytes", row.ID, len(got[row.ID]), got[row.ID], len(row.Payload))
		}
	}
}

// newInbox is an inbox on a table of the test's own.
func newInbox(t *testing.T, url string) *inbox.Inbox {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	table := "public." + pgtest.Name(t, "inbox")
	ib, err := inbox.New(pool, inbox.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pgtest.Exec(t, url, "DROP TABLE IF EXISTS "+table)
		pool.Close()
	})
	return ib
}

// runLoop runs loop until the test ends.
func runLoop(t *testing.T, loop func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		loop(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// ccRows are a payload over the claim check's 1 KiB threshold and a small
// one after it, in one key.
func ccRows() []relaytest.Msg {
	big := relaytest.NewMsg("order.scanned", "k", 1)
	big.Payload = fmt.Sprintf(`{"scan": %q}`, strings.Repeat("0123456789abcdef", 512)) // 8 KiB
	return []relaytest.Msg{big, relaytest.NewMsg("order.placed", "k", 2)}
}

// rabbitReceiver declares a queue bound to a fresh exchange and runs an
// inboxrabbit loop with the claim check on it; it returns the exchange.
func rabbitReceiver(t *testing.T, url string, f inbox.Fetcher, r *received) string {
	t.Helper()
	rabbitURL := rabbittest.Start(t) // skips without RabbitMQ
	tp := rabbittest.Declare(t, rabbitURL, rabbittest.Topology{})
	conn, err := amqp.Dial(rabbitURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ib := newInbox(t, url)
	runLoop(t, func(ctx context.Context) {
		inboxrabbit.Loop(ctx, ch, tp.Queue, inbox.Processor[pgx.Tx](ib), func(ctx context.Context, _ pgx.Tx, d amqp.Delivery) error {
			r.add(d.MessageId, d.Body)
			return nil
		}, inboxrabbit.Options{ClaimCheck: inbox.WithClaimCheck(f), OnError: func(d amqp.Delivery, _ string, err error) {
			t.Logf("inbox loop: message %s: %v", d.MessageId, err)
		}})
	})
	return tp.Exchange
}

// TestIntegrationClaimCheckThroughRabbitMQReachesTheEffect: with
// relay.claim_check (S3) on a rabbitmq sink, an 8 KiB payload over the
// 1 KiB threshold is stored and sent as a reference; the inboxrabbit loop
// with claims3 hands the effect the payload, and the small message as it
// is.
func TestIntegrationClaimCheckThroughRabbitMQReachesTheEffect(t *testing.T) {
	t.Parallel()
	st := newCCStore(t)
	url := pgtest.URL(t)
	var r received
	exchange := rabbitReceiver(t, url, st.fetcher(), &r)
	ob := relaytest.NewOutbox(t, url)
	cfg := ob.Config(t, fmt.Sprintf("  - {name: r, kind: rabbitmq, url: %q, exchange: %q, timeout: 5s}", rabbittest.URL, exchange),
		"relay:\n  retry_backoff: 300ms\n  claim_check: "+st.yaml())
	cdcInit(t, cfg)
	rows := ccRows()
	ob.InsertTx(t, pgtest.Connect(t, url), rows...)
	p := startCDC(t, "run", "--config", cfg)
	r.wait(t, p, rows)
	p.Stop(t)
}

// TestIntegrationClaimCheckThroughNATSReachesTheEffect: the same through
// a nats sink and the inboxnats loop. Before issue 42 the nats sink left
// out every walpost-* header, the claim check's too: the effect got an
// empty body, with no error.
func TestIntegrationClaimCheckThroughNATSReachesTheEffect(t *testing.T) {
	t.Parallel()
	st := newCCStore(t)
	natsURL := natstest.Start(t) // skips without a NATS server
	prefix := natstest.Unique(t)
	stream := natstest.CreateStream(t, natsURL, jetstream.StreamConfig{Name: prefix, Subjects: []string{prefix + ".>"}, Storage: jetstream.MemoryStorage})
	url := pgtest.URL(t)
	cons, err := stream.CreateOrUpdateConsumer(context.Background(), jetstream.ConsumerConfig{Durable: "receiver", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	var r received
	ib := newInbox(t, url)
	runLoop(t, func(ctx context.Context) {
		inboxnats.Loop(ctx, cons, inbox.Processor[pgx.Tx](ib), func(ctx context.Context, _ pgx.Tx, m jetstream.Msg) error {
			r.add(m.Headers().Get("Nats-Msg-Id"), m.Data())
			return nil
		}, inboxnats.Options{ClaimCheck: inbox.WithClaimCheck(st.fetcher())})
	})
	ob := relaytest.NewOutbox(t, url)
	cfg := ob.Config(t, fmt.Sprintf("  - {name: n, kind: nats, servers: [%q], subject: %q, stream: {name: %s}, ack_timeout: 2s}", natsURL, prefix+".{type}", prefix),
		"relay:\n  retry_backoff: 300ms\n  claim_check: "+st.yaml())
	cdcInit(t, cfg)
	rows := ccRows()
	ob.InsertTx(t, pgtest.Connect(t, url), rows...)
	p := startCDC(t, "run", "--config", cfg)
	r.wait(t, p, rows)
	p.Stop(t)
}

// TestIntegrationRowCannotSetTheClaimCheckReference: a row sets the three
// walpost-claim-check headers (any case) on an ordinary message, naming
// s3://private/payroll.json with its right size and SHA-256. The relay
// leaves them out (the relay's own headers never come from a row), and
// the inboxrabbit loop with claims3 (scoped to the claim check's bucket)
// hands the effect the row's own payload: it never fetches the object
// the writer chose. A claim-checked message of the same run still
// arrives whole.
func TestIntegrationRowCannotSetTheClaimCheckReference(t *testing.T) {
	t.Parallel()
	st := newCCStore(t)
	url := pgtest.URL(t)
	var r received
	exchange := rabbitReceiver(t, url, st.fetcher(), &r)
	ob := relaytest.NewOutbox(t, url)
	cfg := ob.Config(t, fmt.Sprintf("  - {name: r, kind: rabbitmq, url: %q, exchange: %q, timeout: 5s}", rabbittest.URL, exchange),
		"relay:\n  retry_backoff: 300ms\n  claim_check: "+st.yaml())
	cdcInit(t, cfg)
	forged := relaytest.NewMsg("order.placed", "k", 1)
	forged.Headers = st.forgedHeaders()
	forged.Headers["tenant"] = "a"
	rows := append([]relaytest.Msg{forged}, ccRows()...)
	ob.InsertTx(t, pgtest.Connect(t, url), rows...)
	p := startCDC(t, "run", "--config", cfg)
	r.wait(t, p, rows)
	if got := r.snapshot()[forged.ID]; strings.Contains(string(got), "payroll") {
		t.Fatalf("the effect got the object the row named: %s", got)
	}
	if !pgtest.WaitFor(10*time.Second, func() bool { return strings.Contains(p.Stderr.String(), "reserved for the relay") }) {
		t.Errorf("no warning names the left-out walpost-* header\n%s", p.Logs())
	}
	p.Stop(t)
}

// TestIntegrationFarFutureExpiryDoesNotStopARabbitMQRelay: a row with
// expires_at 9999-12-31 among others, to RabbitMQ: RabbitMQ takes no
// expiration over 2^32-1 ms (it closes the channel with 406), and before
// issue 42 the relay called that permanent and exited at every start.
// Now the message goes without an expiration, the relay keeps going and
// every row is delivered, the ones after it too.
func TestIntegrationFarFutureExpiryDoesNotStopARabbitMQRelay(t *testing.T) {
	t.Parallel()
	rabbitURL := rabbittest.Start(t) // skips without RabbitMQ
	tp := rabbittest.Declare(t, rabbitURL, rabbittest.Topology{})
	url := pgtest.URL(t)
	ob := scheduledOutbox(t, url)
	cfg := ob.Config(t, fmt.Sprintf("  - {name: r, kind: rabbitmq, url: %q, exchange: %q, timeout: 5s}", rabbitURL, tp.Exchange),
		"columns: {expires_at: expires_at}\nrelay:\n  retry_backoff: 300ms")
	cdcInit(t, cfg)
	rows := []scheduledMsg{
		{Msg: relaytest.NewMsg("order.placed", "k1", 1)},
		{Msg: relaytest.NewMsg("order.placed", "k1", 2), ExpiresAt: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)},
		{Msg: relaytest.NewMsg("order.placed", "k2", 3), ExpiresAt: time.Now().AddDate(300, 0, 0)},
		{Msg: relaytest.NewMsg("order.placed", "k1", 4), ExpiresAt: time.Now().Add(time.Hour)},
		{Msg: relaytest.NewMsg("order.placed", "k2", 5)},
	}
	insertScheduled(t, ob, rows...)
	p := startCDC(t, "run", "--config", cfg)
	got := map[string]amqp.Delivery{}
	if !pgtest.WaitFor(60*time.Second, func() bool {
		for _, d := range rabbittest.Drain(t, rabbitURL, tp.Queue) {
			got[d.MessageId] = d
		}
		return p.Exited() || len(got) == len(rows)
	}) || p.Exited() {
		t.Fatalf("%d of %d messages delivered (relay exited: %v)\n%s", len(got), len(rows), p.Exited(), p.Logs())
	}
	for _, m := range rows[1:3] {
		if e := got[m.ID].Expiration; e != "" {
			t.Errorf("message %s (expires_at %s): expiration %q, want none", m.ID, m.ExpiresAt.Format(time.RFC3339), e)
		}
	}
	if e := got[rows[3].ID].Expiration; e == "" {
		t.Errorf("the message expiring in an hour has no expiration")
	}
	p.Stop(t)
}

// TestIntegrationConsoleWithoutTokensRefusesARebindingHost: a console
// without view_token, operate_token or http.auth, on 127.0.0.1, holds a
// parked message. A request with Host: rebind.attacker.example:PORT and a
// matching Origin (a page of that site whose name now resolves to
// 127.0.0.1: DNS rebinding) is refused, GET and POST: it reads neither
// the rows nor the CSRF token, and the drop, even with the token, leaves
// the message parked. The same requests to 127.0.0.1 and localhost are
// answered, and the drop from there deletes it.
func TestIntegrationConsoleWithoutTokensRefusesARebindingHost(t *testing.T) {
	t.Parallel()
	key := "0123456789abcdef0123456789abcdef"
	url := pgtest.URL(t)
	mo := relaytest.NewMessagesOutbox(t, url)
	port, err := pgtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := mo.Config(t, fmt.Sprintf("  - {name: out, kind: file, path: %s}", t.TempDir()+"/out.jsonl"), "  message_keys: ["+key+"]",
		fmt.Sprintf("http: {listen: '%s', console: true}", addr))
	relaytest.WithDeadLetterTable(t, url, cfg)
	cdcInit(t, cfg)
	conn := pgtest.Connect(t, url)
	// An envelope without a signature is parked (forged).
	if _, err := conn.Exec(context.Background(), "SELECT pg_logical_emit_message(true, $1::text, $2::bytea)", mo.Prefix,
		[]byte(`{"v":1,"id":"`+relaytest.NewMsg("x", "k", 0).ID+`","type":"order.refunded","payload":{"refund":1000}}`)); err != nil {
		t.Fatal(err)
	}
	relay := startCDC(t, "run", "--config", cfg)
	defer relay.Stop(t)
	pgtest.Await(t, 60*time.Second, "the envelope parked", func() bool { return len(listParked(t, cfg)) == 1 })

	evil := fmt.Sprintf("rebind.attacker.example:%d", port)
	call := func(method, path, host, csrf, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("Origin", "http://"+host)
		if method == "POST" {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-CSRF-Token", csrf)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	src := "/api/v1/sources/" + mo.Slot
	for _, path := range []string{"/api/v1/session", src, "/console/"} {
		if code, body := call("GET", path, evil, "", ""); code != http.StatusForbidden || strings.Contains(body, "csrf") || strings.Contains(body, "refund") {
			t.Errorf("GET %s with Host %s: %d, want 403\n%.300s", path, evil, code, body)
		}
	}
	_, sess := call("GET", "/api/v1/session", addr, "", "")
	csrf := csrfOf(t, sess)
	_, body := call("GET", src, addr, "", "")
	var d struct {
		Groups []struct {
			Messages []struct {
				Ref string `json:"ref"`
			} `json:"messages"`
		} `json:"groups"`
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil || len(d.Groups) != 1 || len(d.Groups[0].Messages) != 1 {
		t.Fatalf("GET %s: %v, want one group of one message\n%s", src, err, body)
	}
	drop := `{"messages": ["` + d.Groups[0].Messages[0].Ref + `"]}`
	if code, body := call("POST", src+"/drop", evil, csrf, drop); code != http.StatusForbidden || len(listParked(t, cfg)) != 1 {
		t.Fatalf("drop with Host %s: %d, parked %d; want 403 and the message still parked\n%s", evil, code, len(listParked(t, cfg)), body)
	}
	if code, _ := call("GET", "/api/v1/session", fmt.Sprintf("localhost:%d", port), "", ""); code != http.StatusOK {
		t.Errorf("GET /api/v1/session with Host localhost: %d, want 200", code)
	}
	if code, body := call("POST", src+"/drop", addr, csrf, drop); code != http.StatusOK || len(listParked(t, cfg)) != 0 {
		t.Fatalf("drop with Host %s: %d, parked %d; want 200 and none\n%s", addr, code, len(listParked(t, cfg)), body)
	}
}

// startCCRelay runs the relay of a fresh outbox with sinkYAML and the
// claim check of st, inserts ccRows and waits until r got them whole.
func startCCRelay(t *testing.T, url string, st *ccStore, sinkYAML string, r *received) {
	t.Helper()
	ob := relaytest.NewOutbox(t, url)
	cfg := ob.Config(t, "  - "+sinkYAML, "relay:\n  retry_backoff: 300ms\n  claim_check: "+st.yaml())
	cdcInit(t, cfg)
	rows := ccRows()
	ob.InsertTx(t, pgtest.Connect(t, url), rows...)
	p := startCDC(t, "run", "--config", cfg)
	r.wait(t, p, rows)
	p.Stop(t)
}

// TestIntegrationClaimCheckThroughSQSReachesTheEffect: the claim check
// through an sqs sink (the stand-in) and the inboxsqs loop with claims3.
func TestIntegrationClaimCheckThroughSQSReachesTheEffect(t *testing.T) {
	t.Parallel()
	st := newCCStore(t)
	srv := sqsfake.Start(t)
	queueURL := srv.CreateQueue("cc", sqsfake.QueueOptions{})
	awsCfg, err := awsconfig.LoadDefaultConfig(context.Background(), awsconfig.WithRetryMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	client := awssqs.NewFromConfig(awsCfg, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(srv.URL()) })
	url := pgtest.URL(t)
	var r received
	ib := newInbox(t, url)
	runLoop(t, func(ctx context.Context) {
		inboxsqs.Loop(ctx, client, queueURL, inbox.Processor[pgx.Tx](ib), func(ctx context.Context, _ pgx.Tx, msg sqstypes.Message) error {
			p, err := inboxsqs.Payload(msg)
			if err != nil {
				return err
			}
			r.add(inboxsqs.MessageID(msg), p)
			return nil
		}, inboxsqs.Options{WaitTime: time.Second, RetryBackoff: time.Second, ClaimCheck: inbox.WithClaimCheck(st.fetcher())})
	})
	startCCRelay(t, url, st, fmt.Sprintf("{name: s, kind: sqs, queue: cc, region: us-east-1, endpoint: %q, timeout: 5s}", srv.URL()), &r)
}

// TestIntegrationClaimCheckThroughPubSubReachesTheEffect: the claim check
// through a pubsub sink (the Pub/Sub module's fake) and the inboxpubsub
// loop with claims3.
func TestIntegrationClaimCheckThroughPubSubReachesTheEffect(t *testing.T) {
	t.Parallel()
	st := newCCStore(t)
	srv, _ := startPstest(t, "claims")
	c, err := gps.NewClient(context.Background(), pubsubProject, option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())), option.WithTelemetryDisabled())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	sub := "projects/" + pubsubProject + "/subscriptions/claims"
	if _, err := c.SubscriptionAdminClient.CreateSubscription(context.Background(), &pubsubpb.Subscription{Name: sub,
		Topic: "projects/" + pubsubProject + "/topics/claims", EnableMessageOrdering: true, AckDeadlineSeconds: 10}); err != nil {
		t.Fatal(err)
	}
	url := pgtest.URL(t)
	var r received
	ib := newInbox(t, url)
	runLoop(t, func(ctx context.Context) {
		inboxpubsub.Loop(ctx, c.Subscriber(sub), inbox.Processor[pgx.Tx](ib), func(ctx context.Context, _ pgx.Tx, msg *gps.Message) error {
			r.add(inboxpubsub.MessageID(msg), msg.Data)
			return nil
		}, inboxpubsub.Options{RetryBackoff: 100 * time.Millisecond, ClaimCheck: inbox.WithClaimCheck(st.fetcher())})
	})
	startCCRelay(t, url, st, fmt.Sprintf("{name: p, kind: pubsub, project: %s, topic: claims, emulator_host: %q, timeout: 3s}", pubsubProject, srv.Addr), &r)
}

// TestIntegrationClaimCheckThroughKafkaReachesTheEffect: the claim check
// through a kafka sink (kfake) and the inboxkafka loop with claims3.
func TestIntegrationClaimCheckThroughKafkaReachesTheEffect(t *testing.T) {
	t.Parallel()
	st := newCCStore(t)
	const topic = "cc"
	kc := kafkatest.Start(t, kfake.SeedTopics(1, topic))
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.Addrs()...), kgo.ConsumerGroup("receiver"), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	url := pgtest.URL(t)
	var r received
	ib := newInbox(t, url)
	runLoop(t, func(ctx context.Context) {
		inboxkafka.Loop(ctx, inboxkafka.NewFranzReader(cl), inbox.Processor[pgx.Tx](ib), func(ctx context.Context, _ pgx.Tx, m kafkago.Message) error {
			for _, h := range m.Headers {
				if h.Key == "id" {
					r.add(string(h.Value), m.Value)
				}
			}
			return nil
		}, inboxkafka.Options{ClaimCheck: inbox.WithClaimCheck(st.fetcher())})
	})
	t.Cleanup(cl.Close) // after the loop (cleanups run last first)
	startCCRelay(t, url, st, fmt.Sprintf("{name: k, kind: kafka, brokers: [%s], topic: %s, timeout: 2s}", strings.Join(kc.Addrs(), ", "), topic), &r)
}
