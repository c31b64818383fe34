package keda

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	v2 "k8s.io/api/autoscaling/v2"

	"github.com/kedacore/keda/v2/pkg/scalers"
	"github.com/kedacore/keda/v2/pkg/scalers/scalersconfig"
)

// The records produced into each of the topic's six partitions, and the offsets the group
// commits (-1: none). Partition 3 is empty; 4 and 5 have no committed offset.
var (
	produced  = []int{120, 250, 30, 0, 75, 400}
	committed = []int64{20, 250, 0, 0, -1, -1}
)

func brokers(t *testing.T) string {
	b := os.Getenv("SLUICE_KAFKA_BROKERS")
	if b == "" {
		t.Fatal("SLUICE_KAFKA_BROKERS is not set: these checks run KEDA against the real broker (deploy/local/test.sh conformance starts it)")
	}
	return b
}

func lagBin(t *testing.T) string {
	bin := os.Getenv("SLUICE_LAG_BIN")
	if bin == "" {
		t.Fatal("SLUICE_LAG_BIN is not set: it names the sluice-lag binary under test")
	}
	return bin
}

func saramaConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V3_6_0_0
	c.Producer.Return.Successes = true
	c.Producer.Partitioner = sarama.NewManualPartitioner
	return c
}

// clients connects a client and an admin on it (closing the client closes both).
func clients(t *testing.T) (sarama.Client, sarama.ClusterAdmin) {
	client, err := sarama.NewClient([]string{brokers(t)}, saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		client.Close()
		t.Fatal(err)
	}
	return client, admin
}

// setUp creates a six-partition topic, fills it and commits the group's offsets.
func setUp(t *testing.T, name string) (topic, group string) {
	stamp := time.Now().UnixNano()
	topic, group = fmt.Sprintf("conformance-%s-%d", name, stamp), fmt.Sprintf("conformance-%s-%d", name, stamp)
	client, admin := clients(t)
	defer client.Close()
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 6, ReplicationFactor: 1}, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, err := sarama.NewClusterAdmin([]string{brokers(t)}, saramaConfig()); err == nil {
			_ = c.DeleteConsumerGroup(group)
			_ = c.DeleteTopic(topic)
			_ = c.Close()
		}
	})
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	for p, n := range produced {
		for i := 0; i < n; i++ {
			msg := &sarama.ProducerMessage{Topic: topic, Partition: int32(p), Value: sarama.StringEncoder("x")}
			if _, _, err := producer.SendMessage(msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	commit(t, client, group, topic, committed)
	return topic, group
}

func commit(t *testing.T, client sarama.Client, group, topic string, offsets []int64) {
	manager, err := sarama.NewOffsetManagerFromClient(group, client)
	if err != nil {
		t.Fatal(err)
	}
	for p, off := range offsets {
		if off < 0 {
			continue
		}
		pom, err := manager.ManagePartition(topic, int32(p))
		if err != nil {
			t.Fatal(err)
		}
		pom.ResetOffset(off, "")
		pom.MarkOffset(off, "")
		if err := pom.Close(); err != nil {
			t.Fatal(err)
		}
	}
	manager.Commit()
	if err := manager.Close(); err != nil {
		t.Fatal(err)
	}
}

// One partition's offsets, as the engine takes them.
type offsets struct {
	Committed *int64 `json:"committed"`
	Earliest  *int64 `json:"earliest"`
	Latest    int64  `json:"latest"`
}

// readOffsets reads what KEDA's scaler reads: committed, log start and high watermark.
func readOffsets(t *testing.T, topic, group string) []offsets {
	client, admin := clients(t)
	defer client.Close()
	parts := []int32{0, 1, 2, 3, 4, 5}
	fetched, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]offsets, len(parts))
	for i, p := range parts {
		latest, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		earliest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = offsets{Earliest: &earliest, Latest: latest}
		if b := fetched.GetBlock(topic, p); b != nil && b.Offset >= 0 {
			c := b.Offset
			out[i].Committed = &c
		}
	}
	return out
}

type engineMetric struct {
	Lag               int64 `json:"lag"`
	LagWithPersistent int64 `json:"lag_with_persistent"`
	Active            bool  `json:"active"`
}

// engine runs `sluice-lag simulate keda-kafka` on the same offsets.
func engine(t *testing.T, trigger map[string]any, polls [][]offsets) []engineMetric {
	file, err := os.CreateTemp(t.TempDir(), "keda-kafka-*.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewEncoder(file).Encode(map[string]any{"trigger": trigger, "polls": polls}); err != nil {
		t.Fatal(err)
	}
	file.Close()
	out, err := exec.Command(lagBin(t), "simulate", "keda-kafka", file.Name()).Output()
	if err != nil {
		stderr := ""
		if e, ok := err.(*exec.ExitError); ok {
			stderr = string(e.Stderr)
		}
		t.Fatalf("sluice-lag simulate keda-kafka: %v\n%s", err, stderr)
	}
	var metrics []engineMetric
	if err := json.Unmarshal(out, &metrics); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return metrics
}

// The metadata of each case: KEDA's names; the engine takes the same keys with typed values.
var kafkaCases = []map[string]string{
	{"lagThreshold": "10"},
	{"lagThreshold": "50", "offsetResetPolicy": "earliest"},
	{"lagThreshold": "50", "offsetResetPolicy": "earliest", "allowIdleConsumers": "true"},
	{"lagThreshold": "40", "limitToPartitionsWithLag": "true"},
	{"lagThreshold": "30", "ensureEvenDistributionOfPartitions": "true", "offsetResetPolicy": "earliest"},
	{"lagThreshold": "7", "excludePersistentLag": "true", "allowIdleConsumers": "true"},
	{"lagThreshold": "50", "offsetResetPolicy": "earliest", "scaleToZeroOnInvalidOffset": "true"},
	{"lagThreshold": "1000", "activationLagThreshold": "900"},
	// 597 records of lag here (605 less the 8 earlier cases' commits on partition 0): 597 / 99
	// is exactly the partition count, 6, with a remainder — the cap's edge (KEDA's `>`).
	{"lagThreshold": "99", "offsetResetPolicy": "earliest"},
}

func typed(meta map[string]string) map[string]any {
	out := map[string]any{}
	for k, v := range meta {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[k] = n
		} else if b, err := strconv.ParseBool(v); err == nil {
			out[k] = b
		} else {
			out[k] = v
		}
	}
	return out
}

// TestKafkaScalerMatchesEngine: KEDA's kafka scaler against the real broker, three polls per
// case (the third after the group moves on partition 0), and the engine on the offsets read.
func TestKafkaScalerMatchesEngine(t *testing.T) {
	topic, group := setUp(t, "keda-kafka")
	for i, meta := range kafkaCases {
		t.Run(fmt.Sprintf("case-%d", i), func(t *testing.T) {
			metadata := map[string]string{"bootstrapServers": brokers(t), "consumerGroup": group, "topic": topic}
			for k, v := range meta {
				metadata[k] = v
			}
			ctx := context.Background()
			scaler, err := scalers.NewKafkaScaler(ctx, &scalersconfig.ScalerConfig{
				TriggerMetadata:   metadata,
				GlobalHTTPTimeout: 10 * time.Second,
				MetricType:        v2.AverageValueMetricType,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer scaler.Close(ctx)
			name := scaler.GetMetricSpecForScaling(ctx)[0].External.Metric.Name
			var polls [][]offsets
			var theirs []engineMetric
			for poll := 0; poll < 3; poll++ {
				if poll == 2 {
					client, _ := sarama.NewClient([]string{brokers(t)}, saramaConfig())
					commit(t, client, group, topic, []int64{int64(21 + i)})
					client.Close()
				}
				metrics, active, err := scaler.GetMetricsAndActivity(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				polls = append(polls, readOffsets(t, topic, group))
				theirs = append(theirs, engineMetric{Lag: metrics[0].Value.MilliValue() / 1000, Active: active})
			}
			ours := engine(t, typed(meta), polls)
			for p := range theirs {
				if theirs[p].Lag != ours[p].Lag || theirs[p].Active != ours[p].Active {
					t.Fatalf("poll %d of %v: KEDA %+v, sluice %+v", p, meta, theirs[p], ours[p])
				}
			}
			t.Logf("%v: KEDA and the engine agree: %+v", meta, theirs)
		})
	}
}
