package pubsub

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	gps "cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/rs/zerolog"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/walpost/walpost/internal/message"
	"github.com/walpost/walpost/internal/publish/sinktest"
	"github.com/walpost/walpost/internal/tcpproxy"
)

const project = "walpost-test"

// throttle answers the next n Publish requests with ResourceExhausted,
// as Pub/Sub does when a quota is exceeded.
type throttle struct{ n atomic.Int32 }

func (r *throttle) React(any) (bool, any, error) {
	if r.n.Add(-1) >= 0 {
		return true, nil, status.Error(codes.ResourceExhausted, "quota exceeded (the test's)")
	}
	return false, nil, nil
}

// refuseMark in a message's data makes the fake refuse the Publish
// request holding it with InvalidArgument, as Pub/Sub refuses a message
// for what it holds.
const refuseMark = "refuse-this-message"

// refuser refuses the Publish requests that hold a marked message.
type refuser struct{}

func (refuser) React(req any) (bool, any, error) {
	if pr, ok := req.(*pubsubpb.PublishRequest); ok {
		for _, m := range pr.Messages {
			if strings.Contains(string(m.Data), refuseMark) {
				return true, nil, status.Error(codes.InvalidArgument, "the message holds "+refuseMark+" (the test's)")
			}
		}
	}
	return false, nil, nil
}

// fake is a pstest server of the test's own, behind a proxy the test can
// cut, with a client on it (directly) to create topics.
type fake struct {
	srv      *pstest.Server
	proxy    *tcpproxy.Proxy
	client   *gps.Client
	throttle *throttle
}

var topicSeq atomic.Int64

func startFake(t testing.TB) *fake {
	t.Helper()
	th := &throttle{}
	srv := pstest.NewServer(pstest.ServerReactorOption{FuncName: "Publish", Reactor: th},
		pstest.ServerReactorOption{FuncName: "Publish", Reactor: refuser{}})
	t.Cleanup(func() { srv.Close() })
	proxy, err := tcpproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	c, err := gps.NewClient(context.Background(), project, option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())), option.WithTelemetryDisabled())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &fake{srv: srv, proxy: proxy, client: c, throttle: th}
}

// newTopic creates a topic and returns its ID.
func (f *fake) newTopic(t testing.TB) string {
	t.Helper()
	id := fmt.Sprintf("walpost-t%d", topicSeq.Add(1))
	f.createTopic(t, id)
	return id
}

func (f *fake) createTopic(t testing.TB, id string) {
	t.Helper()
	if _, err := f.client.TopicAdminClient.CreateTopic(context.Background(), &pubsubpb.Topic{Name: "projects/" + project + "/topics/" + id}); err != nil {
		t.Fatal(err)
	}
}

// read returns what topic holds, in the order stored, mapped back to
// outbox messages.
func (f *fake) read(topic string) []*message.Message {
	var out []*message.Message
	for _, pm := range f.srv.Messages() {
		if pm.Topic != "projects/"+project+"/topics/"+topic {
			continue
		}
		m := &message.Message{ID: pm.Attributes[AttrID], Type: pm.Attributes[AttrType], Payload: pm.Data, HasKey: true, Key: pm.Attributes[AttrKey]}
		if _, ok := pm.Attributes[AttrKey]; !ok {
			m.Key = m.ID
		}
		for k, v := range pm.Attributes {
			switch k {
			case AttrID, AttrType, AttrKey:
				continue
			}
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			m.Headers[k] = v
		}
		out = append(out, m)
	}
	return out
}

func testLogger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}

// newSink opens a pubsub sink named "ps" to f (through its proxy) with the
// topic setting and the extra YAML lines given.
func newSink(t testing.TB, f *fake, topic string, extra ...string) *Sink {
	t.Helper()
	rest := strings.Join(extra, "\n")
	if !strings.Contains(rest, "timeout:") {
		rest += "\ntimeout: 5s"
	}
	doc := fmt.Sprintf("name: ps\nkind: pubsub\nproject: %s\nemulator_host: %s\ntopic: %q\n%s", project, f.proxy.Addr(), topic, rest)
	s, err := New(sinktest.SinkConfig(t, doc), testLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*Sink)
}
