package main

import (
	"fmt"
	"path/filepath"

	"github.com/twmb/franz-go/pkg/kfake"
)

// kafkaTopic is the topic every kafka run writes to.
const kafkaTopic = "walpost-bench"

// startKafka starts an in-process Kafka-protocol broker (kfake) that keeps
// its log on disk under dir without fsync per batch (Kafka's own default),
// so that the broker is not the bottleneck.
// With inMemory, the log stays in memory (no DataDir).
func startKafka(dir string, inMemory bool) (*kfake.Cluster, string, error) {
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.SeedTopics(6, kafkaTopic),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": fmt.Sprint(4 << 20)}),
	}
	if !inMemory {
		opts = append(opts, kfake.DataDir(filepath.Join(dir, "kfake")))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, "", err
	}
	return c, c.ListenAddrs()[0], nil
}
