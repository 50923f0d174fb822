//go:build !walpost_no_aws

package claimcheck

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/uuid"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/rs/zerolog"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/inbox/claimazblob"
	"github.com/walpost/walpost/inbox/claims3"
	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish"
	"github.com/walpost/walpost/internal/publish/claimcheck/azurite"
)

// recorder is an inner sink that keeps what it was given.
type recorder struct {
	mu   sync.Mutex
	got  []*message.Message
	fail error
}

func (r *recorder) Name() string { return "rec" }
func (r *recorder) Close() error { return nil }
func (r *recorder) Publish(_ context.Context, msgs []*message.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.got = append(r.got, msgs...)
	return nil
}

func msg(n int) *message.Message {
	p := make([]byte, n)
	rand.Read(p)
	return &message.Message{ID: uuid.NewString(), Type: "t", Payload: p, Headers: map[string]string{"tenant": "a"}}
}

// header returns a lookup of the headers a sink writes for m: the
// headers column's entries and the relay's own.
func header(m *message.Message) func(string) string {
	h := publish.DataHeaders(m)
	return func(name string) string { return h[name] }
}

func TestHeadersMatchInbox(t *testing.T) {
	if HeaderRef != inbox.HeaderClaimCheck || HeaderSize != inbox.HeaderClaimCheckSize || HeaderSHA256 != inbox.HeaderClaimCheckSHA256 {
		t.Fatal("the claim check's header names differ from package inbox's")
	}
}

// azblobStore starts Azurite with a container and returns a store of it.
func startAzblob(t *testing.T) (*azurite.Server, *azblobStore, string) {
	t.Helper()
	az := azurite.Start(t)
	container := "cc" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
	az.CreateContainer(t, container)
	st, err := newAzblob(&config.ClaimCheck{Store: config.StoreAzblob, Container: container, ConnectionString: az.ConnectionString(), Field: "relay.claim_check"})
	if err != nil {
		t.Fatal(err)
	}
	return az, st, container
}

// TestIntegrationClaimCheckStoresLargePayloadsBeforePublishAndInboxFetchesThem:
// of a batch, only the payload over the threshold goes to Azurite, before
// the inner sink sees the batch, in order, with the reference headers in
// its place; inbox.WithClaimCheck with claimazblob gives back the very
// bytes, and a changed object is refused.
func TestIntegrationClaimCheckStoresLargePayloadsBeforePublishAndInboxFetchesThem(t *testing.T) {
	az, st, container := startAzblob(t)
	rec := &recorder{}
	s := New(rec, st, Options{Threshold: 1000, Prefix: "walpost/", Slot: "slot1", Log: zerolog.Nop()})
	small1, big, small2 := msg(10), msg(300<<10), msg(1000)
	if err := s.Publish(context.Background(), []*message.Message{small1, big, small2}); err != nil {
		t.Fatal(err)
	}
	if len(rec.got) != 3 || rec.got[0] != small1 || rec.got[2] != small2 {
		t.Fatalf("the inner sink got %d messages; the small ones must pass unchanged", len(rec.got))
	}
	sent := rec.got[1]
	if sent.ID != big.ID || len(sent.Payload) != 0 || sent.Headers["tenant"] != "a" || header(sent)(HeaderSize) != fmt.Sprint(300<<10) {
		t.Fatalf("claim-checked message: id %s, %d bytes of payload, headers %v", sent.ID, len(sent.Payload), sent.Headers)
	}
	if len(big.Payload) != 300<<10 || len(big.Headers) != 1 {
		t.Fatal("the caller's message was modified")
	}
	want := "walpost/slot1/rec/" + big.ID
	if blobs := az.Blobs(t, container); len(blobs) != 1 || blobs[0] != want {
		t.Fatalf("blobs %v, want [%s]", blobs, want)
	}
	cc := inbox.WithClaimCheck(claimazblob.New(az.Client(t), container, "walpost/"))
	got, err := cc.Resolve(context.Background(), header(sent), sent.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(big.Payload) {
		t.Fatal("the fetched payload differs")
	}
	if got, err := cc.Resolve(context.Background(), header(small1), small1.Payload); err != nil || string(got) != string(small1.Payload) {
		t.Fatalf("a message without the header: %v", err)
	}
	// Another payload under the same name: the message's SHA-256 no
	// longer matches.
	if _, err := st.Put(context.Background(), want, make([]byte, 300<<10), "application/octet-stream"); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.Resolve(context.Background(), header(sent), nil); err == nil || !strings.Contains(err.Error(), "SHA-256") {
		t.Fatalf("a replaced object was accepted: %v", err)
	}
}

// TestIntegrationClaimCheckUploadIsIdempotentByMessageID: the same message
// published twice (a retry, a replay after a crash) is one object.
func TestIntegrationClaimCheckUploadIsIdempotentByMessageID(t *testing.T) {
	az, st, container := startAzblob(t)
	rec := &recorder{fail: fmt.Errorf("broker down")}
	s := New(rec, st, Options{Threshold: 1000, Prefix: "p/", Slot: "s", Log: zerolog.Nop()})
	big := msg(5000)
	if err := s.Publish(context.Background(), []*message.Message{big}); err == nil {
		t.Fatal("the inner sink's error was lost")
	}
	rec.fail = nil
	if err := s.Publish(context.Background(), []*message.Message{big}); err != nil {
		t.Fatal(err)
	}
	if blobs := az.Blobs(t, container); len(blobs) != 1 {
		t.Fatalf("blobs %v, want one", blobs)
	}
}

// count is a counter for publish.ClaimCheckMetrics.
type count struct {
	mu sync.Mutex
	n  float64
}

func (c *count) Inc()          { c.Add(1) }
func (c *count) Add(v float64) { c.mu.Lock(); c.n += v; c.mu.Unlock() }
func (c *count) get() float64  { c.mu.Lock(); defer c.mu.Unlock(); return c.n }

// TestIntegrationClaimCheckFailedUploadIsRetryable: with the store
// unreachable, Publish fails with an error that is neither Permanent nor
// Rejected (the runner retries it; nothing is parked) and the inner sink
// gets nothing; once the store is back the same batch goes through. The
// metrics count the failed upload, then the stored one and its bytes.
func TestIntegrationClaimCheckFailedUploadIsRetryable(t *testing.T) {
	az, st, _ := startAzblob(t)
	rec := &recorder{}
	s := New(rec, st, Options{Threshold: 1000, Prefix: "p/", Slot: "s", Timeout: 5 * time.Second, Log: zerolog.Nop()})
	uploads, bytes, failures := &count{}, &count{}, &count{}
	s.(publish.ClaimChecked).SetClaimCheckMetrics(publish.ClaimCheckMetrics{Uploads: uploads, UploadBytes: bytes, UploadFailures: failures})
	batch := []*message.Message{msg(10), msg(5000)}
	az.Proxy.Cut()
	err := s.Publish(context.Background(), batch)
	if err == nil || publish.IsPermanent(err) || publish.IsRejected(err) {
		t.Fatalf("upload to a store that is down: %v (permanent %v)", err, publish.IsPermanent(err))
	}
	if len(rec.got) != 0 {
		t.Fatalf("the inner sink got %d messages before their upload", len(rec.got))
	}
	if uploads.get() != 0 || bytes.get() != 0 || failures.get() != 1 {
		t.Fatalf("after the failed upload: uploads %v, bytes %v, failures %v; want 0, 0, 1", uploads.get(), bytes.get(), failures.get())
	}
	if err := az.Proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if len(rec.got) != 2 {
		t.Fatalf("the inner sink got %d messages", len(rec.got))
	}
	if uploads.get() != 1 || bytes.get() != 5000 || failures.get() != 1 {
		t.Fatalf("after the upload: uploads %v, bytes %v, failures %v; want 1, 5000, 1", uploads.get(), bytes.get(), failures.get())
	}
}

// StartS3 serves gofakes3 over HTTP with a bucket, sets the AWS
// environment the store's default chain reads, and returns the endpoint.
func startS3(t *testing.T, bucket string) string {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "walpost-test-secret")
	t.Setenv("AWS_REGION", "us-east-1")
	return srv.URL
}

// TestIntegrationClaimCheckS3RoundTrip: the s3 store writes an object
// that claims3 reads back whole, through real HTTP.
func TestIntegrationClaimCheckS3RoundTrip(t *testing.T) {
	endpoint := startS3(t, "walpost-cc")
	st, err := newS3(&config.ClaimCheck{Store: config.StoreS3, Bucket: "walpost-cc", Endpoint: endpoint, PathStyle: true, Field: "relay.claim_check"})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	s := New(rec, st, Options{Threshold: 1000, Prefix: "walpost/", Slot: "slot1", Log: zerolog.Nop()})
	big := msg(1 << 20)
	if err := s.Publish(context.Background(), []*message.Message{big}); err != nil {
		t.Fatal(err)
	}
	sent := rec.got[0]
	if ref, want := header(sent)(HeaderRef), "s3://walpost-cc/walpost/slot1/rec/"+big.ID; ref != want {
		t.Fatalf("reference %s, want %s", ref, want)
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) { o.BaseEndpoint = aws.String(endpoint); o.UsePathStyle = true })
	got, err := inbox.WithClaimCheck(claims3.New(client, "walpost-cc", "walpost/")).Resolve(context.Background(), header(sent), sent.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(big.Payload) {
		t.Fatal("the fetched payload differs")
	}
}

// limited is a recorder that states a limit.
type limited struct{ recorder }

func (l *limited) MaxMessageBytes() int { return 64 << 10 }

// TestThresholdDefaultsToTheSinksLimit: without threshold_bytes the
// threshold is the sink's max_message_bytes less Headroom; a sink that
// states no limit is a Permanent error naming the field.
func TestThresholdDefaultsToTheSinksLimit(t *testing.T) {
	prefix := "walpost/"
	cfg := &config.Sink{Name: "x", Kind: "stdout", ClaimCheck: &config.ClaimCheck{Store: config.StoreS3, Bucket: "b", Region: "us-east-1",
		Prefix: &prefix, Field: "sinks[0].claim_check", Timeout: config.Duration(time.Second)}}
	var inner publish.Sink = &recorder{}
	open, err := Wrap(cfg, func(context.Context) (publish.Sink, error) { return inner, nil }, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open(context.Background()); !publish.IsPermanent(err) || !strings.Contains(err.Error(), "sinks[0].claim_check.threshold_bytes: not set") {
		t.Fatalf("a sink without a limit: %v", err)
	}
	inner = &limited{}
	s, err := open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.(*Sink).opt.Threshold; got != 64<<10-Headroom {
		t.Fatalf("threshold %d, want %d", got, 64<<10-Headroom)
	}
	cfg.ClaimCheck.ThresholdBytes = 100
	if s, err = open(context.Background()); err != nil || s.(*Sink).opt.Threshold != 100 {
		t.Fatalf("threshold_bytes 100: %v", err)
	}
}

// gate is a Store in front of another that records how many uploads run
// at once, holds each until want of them have been in flight together
// (or a while has passed), and fails the upload of one object name.
type gate struct {
	Store
	want    int
	failing string

	mu       sync.Mutex
	inflight int
	most     int
	reached  chan struct{}
	closed   bool // reached is closed
}

// reset starts counting anew, for the next Publish.
func (g *gate) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.most, g.reached, g.closed = 0, make(chan struct{}), false
}

func (g *gate) Put(ctx context.Context, name string, body []byte, contentType string) (string, error) {
	g.mu.Lock()
	g.inflight++
	g.most = max(g.most, g.inflight)
	reached := g.reached
	if g.inflight == g.want && !g.closed {
		close(g.reached)
		g.closed = true
	}
	g.mu.Unlock()
	defer func() { g.mu.Lock(); g.inflight--; g.mu.Unlock() }()
	select {
	case <-reached:
	case <-time.After(10 * time.Second): // uploads one at a time never get here together
	case <-ctx.Done():
		return "", ctx.Err()
	}
	if name == g.failing {
		return "", fmt.Errorf("refused by the test")
	}
	return g.Store.Put(ctx, name, body, contentType)
}

// checker is an inner sink that, when it is called, checks that the
// bucket already holds every object its batch refers to.
type checker struct {
	recorder
	t      *testing.T
	client *s3.Client
	calls  int
}

func (c *checker) Publish(ctx context.Context, msgs []*message.Message) error {
	c.calls++
	out, err := c.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("walpost-cc")})
	if err != nil {
		return err
	}
	stored := map[string]bool{}
	for _, o := range out.Contents {
		stored["s3://walpost-cc/"+aws.ToString(o.Key)] = true
	}
	for _, m := range msgs {
		if ref := header(m)(HeaderRef); ref != "" && !stored[ref] {
			c.t.Errorf("message %s reached the sink before its object %s was stored", m.ID, ref)
		}
	}
	return c.recorder.Publish(ctx, msgs)
}

// TestIntegrationClaimCheckUploadsABatchConcurrentlyAndPublishesAfterAll:
// against gofakes3 over HTTP, a batch of six large payloads is uploaded
// DefaultUploads at a time (four in flight together, never more), and the
// sink sees the batch only once every object is stored. When one upload
// fails, the sink sees nothing and the error is retryable; the retry
// stores the rest and publishes.
func TestIntegrationClaimCheckUploadsABatchConcurrentlyAndPublishesAfterAll(t *testing.T) {
	endpoint := startS3(t, "walpost-cc")
	st, err := newS3(&config.ClaimCheck{Store: config.StoreS3, Bucket: "walpost-cc", Endpoint: endpoint, PathStyle: true, Field: "relay.claim_check"})
	if err != nil {
		t.Fatal(err)
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) { o.BaseEndpoint = aws.String(endpoint); o.UsePathStyle = true })
	inner := &checker{t: t, client: client}
	g := &gate{Store: st, want: DefaultUploads, reached: make(chan struct{})}
	s := New(inner, g, Options{Threshold: 1000, Prefix: "walpost/", Slot: "slot1", Log: zerolog.Nop()}).(*Sink)
	batch := []*message.Message{msg(10)}
	for range 6 {
		batch = append(batch, msg(64<<10))
	}
	batch = append(batch, msg(20))

	g.failing = s.ObjectName(batch[3])
	err = s.Publish(context.Background(), batch)
	if err == nil || publish.IsPermanent(err) || !strings.Contains(err.Error(), batch[3].ID) {
		t.Fatalf("one upload refused: %v, want a retryable error naming %s", err, batch[3].ID)
	}
	if inner.calls != 0 {
		t.Fatal("the sink was called although an upload of its batch failed")
	}

	g.failing = ""
	g.reset()
	if err := s.Publish(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	together, most := g.closed, g.most
	g.mu.Unlock()
	if !together {
		t.Fatalf("at most %d uploads ran at once, want %d", most, DefaultUploads)
	}
	if most > DefaultUploads {
		t.Fatalf("%d uploads ran at once, over the bound %d", most, DefaultUploads)
	}
	if inner.calls != 1 || len(inner.got) != len(batch) {
		t.Fatalf("the sink was called %d times with %d messages, want once with %d", inner.calls, len(inner.got), len(batch))
	}
	for i, m := range inner.got {
		if m.ID != batch[i].ID {
			t.Fatalf("message %d is %s, want %s: the batch's order changed", i, m.ID, batch[i].ID)
		}
		if big := len(batch[i].Payload) > 1000; big != (header(m)(HeaderRef) != "") {
			t.Fatalf("message %d (%d bytes): reference %q", i, len(batch[i].Payload), header(m)(HeaderRef))
		}
	}
}
