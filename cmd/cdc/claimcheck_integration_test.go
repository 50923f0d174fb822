package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/inbox/claimazblob"
	"github.com/walpost/walpost/inbox/claims3"
	"github.com/walpost/walpost/inbox/inboxsb"
	"github.com/walpost/walpost/internal/pgtest"
	"github.com/walpost/walpost/internal/publish/claimcheck/azurite"
	"github.com/walpost/walpost/internal/publish/servicebus/sbfake"
	"github.com/walpost/walpost/internal/relaytest"
)

// claimCheckSetup is a 256 KiB Service Bus queue (the stand-in's default,
// Standard's limit), an Azurite container, an outbox whose config sends
// to the queue with relay.claim_check on the container, and an inbox loop
// with inbox.WithClaimCheck that records each message's body by id.
type claimCheckSetup struct {
	sb        *sbfake.Broker
	az        *azurite.Server
	container string
	ob        relaytest.Outbox
	cfg       string
	env       []string // the relay's extra environment
	// scheduled: the outbox has the deliver_at and expires_at columns,
	// mapped (scheduledOutbox).
	scheduled bool
	// metricsAddr is the relay's http.listen, for /metrics.
	metricsAddr string

	mu   sync.Mutex
	got  map[string][]byte    // body seen by the effect, by message id
	at   map[string]time.Time // when the effect saw it, by message id
	runs int                  // effects committed
}

func newClaimCheckSetup(t *testing.T) *claimCheckSetup {
	t.Helper()
	return newClaimCheckSetupOf(t, &claimCheckSetup{})
}

// newClaimCheckSetupOf sets s up as newClaimCheckSetup does, with s's
// options (scheduled).
func newClaimCheckSetupOf(t *testing.T, s *claimCheckSetup) *claimCheckSetup {
	t.Helper()
	s.az = azurite.Start(t)
	s.container = "cc" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
	s.az.CreateContainer(t, s.container)
	s.start(t, fmt.Sprintf("{store: azblob, container: %s, connection_string: %q, timeout: 5s}", s.container, s.az.ConnectionString()),
		claimazblob.New(s.az.Client(t), s.container, "walpost/"), nil)
	return s
}

// start sets up the queue, the outbox with claimCheckYAML as
// relay.claim_check, and the inbox loop fetching with f; env is the
// relay's extra environment.
func (s *claimCheckSetup) start(t *testing.T, claimCheckYAML string, f inbox.Fetcher, env []string) {
	t.Helper()
	s.sb, s.got, s.at, s.env = sbfake.Start(t), map[string][]byte{}, map[string]time.Time{}, env
	s.sb.CreateQueue(t, "orders", sbfake.QueueOptions{})
	url := pgtest.URL(t)
	extra := ""
	if s.scheduled {
		s.ob, extra = scheduledOutbox(t, url), scheduleColumns+"\n"
	} else {
		s.ob = relaytest.NewOutbox(t, url)
	}
	port, err := pgtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s.metricsAddr = fmt.Sprintf("127.0.0.1:%d", port)
	s.cfg = s.ob.Config(t,
		fmt.Sprintf("  - {name: sb, kind: servicebus, connection_string: %q, queue: orders, timeout: 10s}", s.sb.ConnectionString()),
		extra+fmt.Sprintf("http: {listen: '%s'}\n", s.metricsAddr)+
			"relay:\n  retry_backoff: 300ms\n  shutdown_timeout: 2s\n  claim_check: "+claimCheckYAML)
	cdcInit(t, s.cfg)

	// The receiver: inboxsb.Loop with the claim check, on an inbox table
	// of the test's own.
	ctx, cancel := context.WithCancel(context.Background())
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
	client, err := azservicebus.NewClientFromConnectionString(s.sb.ConnectionString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	recv, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		inboxsb.Loop(ctx, recv, ib, func(ctx context.Context, tx pgx.Tx, msg *azservicebus.ReceivedMessage) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.got[msg.MessageID] = msg.Body
			s.at[msg.MessageID] = time.Now()
			s.runs++
			return nil
		}, inboxsb.Options{
			ClaimCheck: inbox.WithClaimCheck(f),
			OnError: func(msg *azservicebus.ReceivedMessage, err error) {
				t.Logf("inbox loop: message %s: %v", msg.MessageID, err)
			},
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		recv.Close(context.Background())
		client.Close(context.Background())
		pgtest.Exec(t, url, "DROP TABLE IF EXISTS "+table)
		pool.Close()
	})
}

// rows returns a 1 MiB message and a small one after it, in one key.
func claimCheckRows() []relaytest.Msg {
	big := relaytest.NewMsg("order.scanned", "k", 1)
	big.Payload = fmt.Sprintf(`{"scan": %q}`, strings.Repeat("0123456789abcdef", 1<<16)) // 1 MiB and a bit
	return []relaytest.Msg{big, relaytest.NewMsg("order.placed", "k", 2)}
}

// received returns the bodies the effect saw, by id.
func (s *claimCheckSetup) received() map[string][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]byte, len(s.got))
	for k, v := range s.got {
		out[k] = v
	}
	return out
}

// waitReceived waits until the effect saw every row of rows, and checks
// that each body is the row's payload (as JSON: the outbox's jsonb
// column respaces it).
func (s *claimCheckSetup) waitReceived(t *testing.T, p *proc, rows []relaytest.Msg) {
	t.Helper()
	if !pgtest.WaitFor(90*time.Second, func() bool { return p.Exited() || len(s.received()) == len(rows) }) || p.Exited() {
		t.Fatalf("the inbox loop received %d of %d messages (relay exited: %v)\n%s", len(s.received()), len(rows), p.Exited(), p.Logs())
	}
	got := s.received()
	for _, r := range rows {
		var want, have any
		if err := json.Unmarshal([]byte(r.Payload), &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got[r.ID], &have); err != nil {
			t.Fatalf("message %s: the effect's body (%d bytes) is not the payload: %v", r.ID, len(got[r.ID]), err)
		}
		if !reflect.DeepEqual(want, have) {
			t.Fatalf("message %s: the effect's body (%d bytes) differs from the payload (%d bytes)", r.ID, len(got[r.ID]), len(r.Payload))
		}
	}
}

// metric returns the value of series (name and labels as exposed) in the
// relay's /metrics, -1 when absent.
func (s *claimCheckSetup) metric(t *testing.T, series string) float64 {
	t.Helper()
	code, _, body := get(t, s.metricsAddr, "/metrics", "")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	return metricValue(body, series)
}

// Claim-check series of sink sb.
const (
	ccUploads  = `walpost_claim_check_uploads_total{sink="sb"}`
	ccBytes    = `walpost_claim_check_upload_bytes_total{sink="sb"}`
	ccFailures = `walpost_claim_check_upload_failures_total{sink="sb"}`
)

// checkOneBlob checks that the container holds exactly the big row's
// object, under its name derived from the slot, sink and message id.
func (s *claimCheckSetup) checkOneBlob(t *testing.T, id string) {
	t.Helper()
	want := "walpost/" + s.ob.Slot + "/sb/" + id
	if blobs := s.az.Blobs(t, s.container); len(blobs) != 1 || blobs[0] != want {
		t.Fatalf("blobs %v, want [%s]", blobs, want)
	}
}

// TestIntegrationClaimCheckCarriesA1MiBPayloadThroughA256KiBServiceBusQueue:
// a 1 MiB payload to a queue that takes 256 KiB is stored in Azurite by
// relay.claim_check, the Service Bus message carries the reference, and an
// inboxsb loop with inbox.WithClaimCheck hands its effect the payload; the
// small message after it goes as it is; the storage key is never logged.
func TestIntegrationClaimCheckCarriesA1MiBPayloadThroughA256KiBServiceBusQueue(t *testing.T) {
	t.Parallel()
	s := newClaimCheckSetup(t)
	rows := claimCheckRows()
	s.ob.InsertTx(t, pgtest.Connect(t, s.ob.URL), rows...)
	p := startCDC(t, "run", "--config", s.cfg)
	s.waitReceived(t, p, rows)
	// One upload of the 1 MiB payload (as the relay reads it: the
	// jsonb column respaces it, a few bytes at most), none failed.
	if n, b, f := s.metric(t, ccUploads), s.metric(t, ccBytes), s.metric(t, ccFailures); n != 1 || b < 1<<20 || b > 1<<20+64 || f != 0 {
		t.Fatalf("/metrics: uploads %v, bytes %v, failures %v; want 1, about 1 MiB, 0", n, b, f)
	}
	p.Stop(t)
	s.checkOneBlob(t, rows[0].ID)
	if st := s.sb.Stats(t, "orders"); st.Rejected != 0 {
		t.Fatalf("the queue rejected %d transfers: the big payload went to the broker", st.Rejected)
	}
	if strings.Contains(p.Stderr.String(), azurite.Key) {
		t.Fatal("the relay logged the storage account key")
	}
}

// TestIntegrationClaimCheckStoreDownIsRetried: while the blob store is
// unreachable the relay retries the upload (it neither stops nor parks
// nor sends the message without its payload); once the store is back the
// message arrives whole.
func TestIntegrationClaimCheckStoreDownIsRetried(t *testing.T) {
	t.Parallel()
	s := newClaimCheckSetup(t)
	s.az.Proxy.Cut()
	rows := claimCheckRows()
	s.ob.InsertTx(t, pgtest.Connect(t, s.ob.URL), rows...)
	p := startCDC(t, "run", "--config", s.cfg)
	if !pgtest.WaitFor(60*time.Second, func() bool {
		return p.Exited() || strings.Count(p.Stderr.String(), "claim check: storing") >= 2
	}) || p.Exited() {
		t.Fatalf("no retried upload in the log (relay exited: %v)\n%s", p.Exited(), p.Logs())
	}
	if st := s.sb.Stats(t, "orders"); st.Stored != 0 {
		t.Fatalf("%d messages reached the queue while the store was down", st.Stored)
	}
	if n, f := s.metric(t, ccUploads), s.metric(t, ccFailures); n != 0 || f < 2 {
		t.Fatalf("/metrics while the store is down: uploads %v, failures %v; want 0 and at least the 2 failures logged", n, f)
	}
	if err := s.az.Proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	s.waitReceived(t, p, rows)
	if n := s.metric(t, ccUploads); n != 1 {
		t.Fatalf("/metrics once the store is back: uploads %v, want 1", n)
	}
	p.Stop(t)
	s.checkOneBlob(t, rows[0].ID)
}

// TestIntegrationClaimCheckKill9DuringUploadLosesNothing: the relay is
// killed with SIGKILL while its upload of the big payload hangs in the
// network (the proxy in front of Azurite frozen); nothing reached the
// queue. A new relay uploads it again, under the same name, and both
// messages arrive, the big one whole.
func TestIntegrationClaimCheckKill9DuringUploadLosesNothing(t *testing.T) {
	t.Parallel()
	s := newClaimCheckSetup(t)
	s.az.Proxy.Freeze()
	rows := claimCheckRows()
	s.ob.InsertTx(t, pgtest.Connect(t, s.ob.URL), rows...)
	p := startCDC(t, "run", "--config", s.cfg)
	if !pgtest.WaitFor(60*time.Second, func() bool { return p.Exited() || s.az.Proxy.Conns() > 0 }) || p.Exited() {
		t.Fatalf("the relay did not start its upload (relay exited: %v)\n%s", p.Exited(), p.Logs())
	}
	p.Kill9(t)
	if st := s.sb.Stats(t, "orders"); st.Stored != 0 {
		t.Fatalf("%d messages reached the queue before their upload completed", st.Stored)
	}
	s.az.Proxy.Thaw()
	p = startCDC(t, "run", "--config", s.cfg)
	s.waitReceived(t, p, rows)
	p.Stop(t)
	s.checkOneBlob(t, rows[0].ID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs != len(rows) {
		t.Fatalf("%d effects committed for %d messages", s.runs, len(rows))
	}
}

// TestIntegrationClaimCheckS3CarriesA1MiBPayload: the same with store: s3,
// against gofakes3 served over HTTP (path-style, credentials from the
// environment as the AWS default chain reads them), read back by the
// inbox loop with claims3.
func TestIntegrationClaimCheckS3CarriesA1MiBPayload(t *testing.T) {
	t.Parallel()
	backend := s3mem.New()
	if err := backend.CreateBucket("walpost-cc"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	creds := credentials.NewStaticCredentialsProvider("AKIDTEST", "walpost-test-secret", "")
	client := s3.New(s3.Options{Region: "us-east-1", Credentials: creds, BaseEndpoint: aws.String(srv.URL), UsePathStyle: true})
	s := &claimCheckSetup{}
	s.start(t, fmt.Sprintf("{store: s3, bucket: walpost-cc, endpoint: %q, path_style: true, region: us-east-1}", srv.URL), claims3.New(client, "walpost-cc", "walpost/"),
		[]string{"AWS_ACCESS_KEY_ID=AKIDTEST", "AWS_SECRET_ACCESS_KEY=walpost-test-secret"})
	rows := claimCheckRows()
	s.ob.InsertTx(t, pgtest.Connect(t, s.ob.URL), rows...)
	p := startCDCEnv(t, s.env, "run", "--config", s.cfg)
	s.waitReceived(t, p, rows)
	p.Stop(t)
	out, err := client.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String("walpost-cc")})
	if err != nil {
		t.Fatal(err)
	}
	if want := "walpost/" + s.ob.Slot + "/sb/" + rows[0].ID; len(out.Contents) != 1 || aws.ToString(out.Contents[0].Key) != want {
		t.Fatalf("%d objects, want one: %s", len(out.Contents), want)
	}
}

// TestIntegrationClaimCheckScheduledPayloadArrivesNoEarlier: a 1 MiB
// payload whose deliver_at is 3 s ahead, to a Service Bus queue that
// takes 256 KiB, is stored in Azurite by the claim check and sent with
// ScheduledEnqueueTime: the inboxsb loop with inbox.WithClaimCheck gets
// it whole, no earlier than its deliver_at, after the small message
// without one written after it in the same transaction.
func TestIntegrationClaimCheckScheduledPayloadArrivesNoEarlier(t *testing.T) {
	t.Parallel()
	s := newClaimCheckSetupOf(t, &claimCheckSetup{scheduled: true})
	rows := claimCheckRows()
	deliverAt := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	insertScheduled(t, s.ob, scheduledMsg{Msg: rows[0], DeliverAt: deliverAt, ExpiresAt: deliverAt.Add(time.Hour)}, scheduledMsg{Msg: rows[1]})
	p := startCDC(t, "run", "--config", s.cfg)
	s.waitReceived(t, p, rows)
	p.Stop(t)
	s.mu.Lock()
	big, small := s.at[rows[0].ID], s.at[rows[1].ID]
	s.mu.Unlock()
	if big.Before(deliverAt) {
		t.Fatalf("the scheduled 1 MiB message reached the effect at %s, before its deliver_at %s", big.Format(time.RFC3339Nano), deliverAt.Format(time.RFC3339Nano))
	}
	if !small.Before(big) {
		t.Fatalf("the unscheduled message (at %s) did not arrive before the scheduled one (at %s)", small.Format(time.RFC3339Nano), big.Format(time.RFC3339Nano))
	}
	s.checkOneBlob(t, rows[0].ID)
	if st := s.sb.Stats(t, "orders"); st.Scheduled != 1 || st.Rejected != 0 {
		t.Fatalf("the queue scheduled %d messages and rejected %d transfers; want 1 and 0", st.Scheduled, st.Rejected)
	}
}
