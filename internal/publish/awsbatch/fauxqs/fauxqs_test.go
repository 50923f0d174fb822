package fauxqs

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	sqsapi "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// TestIntegrationDrainWaitsForAReceiveWhoseAnswerWasLost: a receive
// whose answer never reached Drain (here: one the test makes and drops)
// leaves ten messages in flight; Drain returns them all once their
// visibility timeout ends, each group of a FIFO queue in order, instead
// of stopping at the first empty receive (the CI failure this fixes:
// ten messages of a standard queue missing, every later message of ten
// FIFO groups held behind them).
func TestIntegrationDrainWaitsForAReceiveWhoseAnswerWasLost(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	for _, name := range []string{"drain-lost", "drain-lost.fifo"} {
		t.Run(name, func(t *testing.T) {
			s.CreateQueue(t, name, nil)
			fifo := name == "drain-lost.fifo"
			const groups, per = 12, 5
			for i := 0; i < per; i++ {
				in := &sqsapi.SendMessageBatchInput{QueueUrl: aws.String(s.QueueURL(name))}
				for g := 0; g < groups; g++ {
					e := sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(g)), MessageBody: aws.String(fmt.Sprintf("g%02d-%d", g, i))}
					if fifo {
						e.MessageGroupId = aws.String(fmt.Sprintf("g%02d", g))
						e.MessageDeduplicationId = aws.String(fmt.Sprintf("g%02d-%d", g, i))
					}
					in.Entries = append(in.Entries, e)
					if len(in.Entries) == 10 || g == groups-1 {
						if out, err := s.sqs.SendMessageBatch(ctx, in); err != nil || len(out.Failed) > 0 {
							t.Fatalf("SendMessageBatch: %v %v", err, out)
						}
						in.Entries = nil
					}
				}
			}
			lost, err := s.sqs.ReceiveMessage(ctx, &sqsapi.ReceiveMessageInput{QueueUrl: aws.String(s.QueueURL(name)), MaxNumberOfMessages: 10, VisibilityTimeout: 2})
			if err != nil || len(lost.Messages) != 10 {
				t.Fatalf("the lost receive: %v, %d messages", err, len(lost.Messages))
			}
			start := time.Now()
			got := s.Drain(t, name)
			t.Logf("Drain took %s", time.Since(start).Round(time.Millisecond))
			if len(got) != groups*per {
				t.Fatalf("Drain returned %d messages, want %d", len(got), groups*per)
			}
			seen := map[string]bool{}
			next := map[string]int{}
			for _, m := range got {
				if seen[m.Body] {
					t.Errorf("%s returned twice", m.Body)
				}
				seen[m.Body] = true
				var g string
				var i int
				fmt.Sscanf(m.Body, "%3s-%d", &g, &i)
				if fifo && i != next[g] {
					t.Errorf("group %s: %s came after %d of its messages", g, m.Body, next[g])
				}
				next[g]++
			}
		})
	}
}
