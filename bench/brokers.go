package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	gps "cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/walpost/walpost/internal/publish/sns/snsfake"
	"github.com/walpost/walpost/internal/publish/sqs/sqsfake"
)

// The NATS JetStream and RabbitMQ runs publish to the servers the machine
// runs (the ones the sinks' own tests use: internal/publish/natsjs/natstest,
// internal/publish/rabbitmq/rabbittest), not to throwaway ones: each run
// creates a stream, or an exchange and a queue, of its own under a unique
// name and deletes it afterwards; the servers themselves are never stopped
// or reconfigured. When a server does not answer, the run is reported as
// skipped, with the reason, and the bench goes on.

// The servers' addresses (variables for the tests only).
var (
	natsAddr   = "127.0.0.1:4222"
	natsURL    = "nats://" + natsAddr
	rabbitAddr = "127.0.0.1:5672"
	rabbitURL  = "amqp://guest:guest@" + rabbitAddr + "/"
)

const (
	// rabbitQueueExpiry is the x-expires of the bench's queue: if the
	// bench is killed before it deletes the queue, the server does (and
	// the auto-delete exchange goes with the queue's binding).
	rabbitQueueExpiry = 15 * time.Minute
	brokerTimeout     = 10 * time.Second
)

// skipPrefix starts the error of a run that was not made because what it
// needs is not there (a server that does not answer).
const skipPrefix = "skipped: "

// skipped returns the error of a run that cannot be made, and why.
func skipped(format string, args ...any) error {
	return errors.New(skipPrefix + fmt.Sprintf(format, args...))
}

func isSkipped(errText string) bool { return strings.HasPrefix(errText, skipPrefix) }

// brokerSuffix is 12 random hex digits, legal in a stream name, a subject
// token, an exchange and a queue name.
func brokerSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sinkDest is where a walpost run's sink publishes: what its sinks: entry
// needs besides the kind.
type sinkDest struct {
	KafkaAddr string
	// NATS: the stream the bench created and the subject template (under
	// the stream's own prefix).
	NATSStream, NATSSubject string
	// RabbitMQ: the exchange the bench declared (its queue is bound with #).
	RabbitExchange string
	// SQS: the stand-in's endpoint and the FIFO queue the bench created.
	SQSEndpoint, SQSQueue string
	// SNS: the stand-in's endpoint and the FIFO topic the bench created.
	SNSEndpoint, SNSTopicARN string
	// Pub/Sub: pstest's address and the topic the bench created.
	PubSubHost, PubSubTopic string
}

// startSNS starts the SNS stand-in (internal/publish/sns/snsfake) in the
// bench's process with a FIFO topic of the run's own.
func startSNS() (*snsfake.Server, string, error) {
	srv := snsfake.New()
	if err := srv.Listen("127.0.0.1:0"); err != nil {
		return nil, "", err
	}
	name := "wpbench-" + brokerSuffix() + ".fifo"
	srv.CreateTopic(name)
	return srv, name, nil
}

// pubsubProject is the project of the Pub/Sub runs' topics.
const pubsubProject = "wpbench"

// startPubSub starts pstest, the Pub/Sub module's fake, in the bench's
// process, as kfake is for Kafka, with a topic of the run's own.
func startPubSub() (*pstest.Server, string, error) {
	srv := pstest.NewServer()
	c, err := gps.NewClient(context.Background(), pubsubProject, option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())), option.WithTelemetryDisabled())
	if err != nil {
		srv.Close()
		return nil, "", err
	}
	defer c.Close()
	topic := "wpbench-" + brokerSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), brokerTimeout)
	defer cancel()
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/" + pubsubProject + "/topics/" + topic}); err != nil {
		srv.Close()
		return nil, "", err
	}
	return srv, topic, nil
}

// sqsEnv is the environment an SQS run's relay finds its credentials in
// (the stand-in checks no signature), kept off the instance metadata
// service.
var sqsEnv = []string{
	"AWS_ACCESS_KEY_ID=bench", "AWS_SECRET_ACCESS_KEY=bench", "AWS_EC2_METADATA_DISABLED=true",
	"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
}

// startSQS starts the SQS stand-in (internal/publish/sqs/sqsfake) in the
// bench's process, as kfake is for Kafka, with a FIFO queue of the run's
// own: no emulator in the registries speaks the SDK's protocol.
func startSQS() (*sqsfake.Server, string, error) {
	srv := sqsfake.New()
	if err := srv.Listen("127.0.0.1:0"); err != nil {
		return nil, "", err
	}
	q := "wpbench-" + brokerSuffix() + ".fifo"
	srv.CreateQueue(q, sqsfake.QueueOptions{})
	return srv, q, nil
}

// brokerTarget is a stream, or an exchange with its queue, created for one
// run: stored counts what it holds, remove deletes it.
type brokerTarget struct {
	dest   sinkDest
	stored func() (int64, error)
	remove func() error
}

// natsStream creates a JetStream stream of the run's own on the machine's
// NATS server (file storage, one replica, subjects wpbench.<id>.>, a
// duplicate window of 2 minutes, as docs/sinks/nats.md suggests).
func natsStream() (*brokerTarget, error) {
	nc, err := nats.Connect(natsURL, nats.Timeout(2*time.Second), nats.MaxReconnects(0), nats.Name("walpost-bench"))
	if err != nil {
		return nil, skipped("no NATS server at %s (%v)", natsAddr, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), brokerTimeout)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		nc.Close()
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return nil, skipped("the NATS server at %s has JetStream off (%v)", natsAddr, err)
		}
		return nil, fmt.Errorf("NATS at %s: JetStream account info: %w", natsAddr, err)
	}
	id := brokerSuffix()
	name := "WPBENCH_" + strings.ToUpper(id)
	prefix := "wpbench." + id
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{prefix + ".>"}, Storage: jetstream.FileStorage, Replicas: 1, Duplicates: 2 * time.Minute,
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("creating JetStream stream %s on %s: %w", name, natsAddr, err)
	}
	return &brokerTarget{
		dest: sinkDest{NATSStream: name, NATSSubject: prefix + ".{type}"},
		stored: func() (int64, error) {
			ctx, cancel := context.WithTimeout(context.Background(), brokerTimeout)
			defer cancel()
			info, err := st.Info(ctx)
			if err != nil {
				return 0, err
			}
			return int64(info.State.Msgs), nil
		},
		remove: func() error {
			defer nc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), brokerTimeout)
			defer cancel()
			if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("deleting stream %s: %w", name, err)
			}
			return nil
		},
	}, nil
}

// rabbitDial connects to the machine's RabbitMQ as guest.
func rabbitDial() (*amqp.Connection, error) {
	return amqp.DialConfig(rabbitURL, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
}

// rabbitTopology declares an exchange (topic, durable, auto-delete) and a
// durable classic queue (x-expires) bound to it with #, of the run's own,
// on the machine's RabbitMQ.
func rabbitTopology() (*brokerTarget, error) {
	c, err := net.DialTimeout("tcp", rabbitAddr, 2*time.Second)
	if err != nil {
		return nil, skipped("no RabbitMQ at %s (%v)", rabbitAddr, err)
	}
	c.Close()
	conn, err := rabbitDial()
	if err != nil {
		return nil, skipped("RabbitMQ at %s refuses guest/guest (%v)", rabbitAddr, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	id := brokerSuffix()
	x, q := "walpost.bench.x."+id, "walpost.bench.q."+id
	if err := ch.ExchangeDeclare(x, amqp.ExchangeTopic, true, true, false, false, nil); err != nil {
		return nil, fmt.Errorf("declaring exchange %s: %w", x, err)
	}
	args := amqp.Table{"x-expires": int32(rabbitQueueExpiry / time.Millisecond)}
	remove := func() error {
		conn, err := rabbitDial()
		if err != nil {
			return fmt.Errorf("deleting queue %s and exchange %s: %w", q, x, err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			return fmt.Errorf("deleting queue %s: %w", q, err)
		}
		// Auto-delete: normally gone with the queue's binding already.
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			return fmt.Errorf("deleting exchange %s: %w", x, err)
		}
		return nil
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
		_ = remove()
		return nil, fmt.Errorf("declaring queue %s: %w", q, err)
	}
	if err := ch.QueueBind(q, "#", x, false, nil); err != nil {
		_ = remove()
		return nil, fmt.Errorf("binding queue %s to %s: %w", q, x, err)
	}
	return &brokerTarget{
		dest: sinkDest{RabbitExchange: x},
		stored: func() (int64, error) {
			conn, err := rabbitDial()
			if err != nil {
				return 0, err
			}
			defer conn.Close()
			ch, err := conn.Channel()
			if err != nil {
				return 0, err
			}
			st, err := ch.QueueDeclarePassive(q, true, false, false, false, args)
			return int64(st.Messages), err
		},
		remove: remove,
	}, nil
}
