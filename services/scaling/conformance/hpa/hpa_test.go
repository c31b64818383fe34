// Package hpa runs Kubernetes' own HPA controller (k8s.io/kubernetes/pkg/controller/podautoscaler,
// from its released module) on the committed traces under testdata/, the way its own unit tests
// drive it: a fake clientset holds the HorizontalPodAutoscaler, a fake scale client holds the
// Deployment's replicas, and a fake external-metrics client answers with the trace's value at the
// moment the controller asks. Time is virtual (testing/synctest): the controller's 15 s resync and
// every window and policy period run on the fake clock, so a 40-minute trace takes milliseconds
// and the sync instants are exact.
//
// Each case's replica timeline is compared with Sluice's engine (`sluice-lag simulate hpa-case`,
// the binary named by SLUICE_LAG_BIN) on the same trace: they must be identical, sync by sync.
package hpa

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/meta/testrestmapper"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	scalefake "k8s.io/client-go/scale/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	autoscalingapiv2 "k8s.io/kubernetes/pkg/apis/autoscaling/v2"
	"k8s.io/kubernetes/pkg/controller"
	"k8s.io/kubernetes/pkg/controller/podautoscaler"
	metricsclient "k8s.io/kubernetes/pkg/controller/podautoscaler/metrics"
	emapi "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
	metricsfake "k8s.io/metrics/pkg/client/clientset/versioned/fake"
	cmfake "k8s.io/metrics/pkg/client/custom_metrics/fake"
	emfake "k8s.io/metrics/pkg/client/external_metrics/fake"

	_ "k8s.io/kubernetes/pkg/apis/apps/install"
	_ "k8s.io/kubernetes/pkg/apis/autoscaling/install"
)

const (
	namespace  = "sluice"
	hpaName    = "keda-hpa-processor"
	deployment = "processor"
	metricName = "s0-sluice-processor"
)

// A committed case: the HPA as KEDA would create it and the metric the HPA reads over time.
type hpaCase struct {
	Name string `json:"name"`
	// The kube-controller-manager's flags.
	SyncPeriodS        int     `json:"sync_period_s"`
	DownscaleWindowS   int     `json:"downscale_window_s"`
	Tolerance          float64 `json:"tolerance"`
	InitialReplicas    int32   `json:"initial_replicas"`
	MinReplicas        int32   `json:"min_replicas"`
	MaxReplicas        int32   `json:"max_replicas"`
	TargetAverageMilli int64   `json:"target_average_milli"`
	// The ScaledObject's advanced.horizontalPodAutoscalerConfig.behavior, as the API takes it.
	Behavior  *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior"`
	DurationS int                                            `json:"duration_s"`
	// A step function: [seconds since start, value in milli-units]; the value at t is the last
	// point at or before t.
	Metric [][2]int64 `json:"metric"`
}

// One sync of the controller: when, what it read, and the replicas before and after.
type syncRecord struct {
	AtMs        int64 `json:"at_ms"`
	MetricMilli int64 `json:"metric_milli"`
	Before      int32 `json:"before"`
	After       int32 `json:"after"`
}

func (c *hpaCase) metricAt(sinceStart time.Duration) int64 {
	ms := sinceStart.Milliseconds()
	value := int64(0)
	for _, p := range c.Metric {
		if p[0]*1000 <= ms {
			value = p[1]
		}
	}
	return value
}

func loadCases(t *testing.T) []string {
	paths, err := filepath.Glob("testdata/*.json")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no cases under testdata/: %v", err)
	}
	sort.Strings(paths)
	return paths
}

func TestControllerMatchesSluiceEngine(t *testing.T) {
	bin := os.Getenv("SLUICE_LAG_BIN")
	if bin == "" {
		t.Fatal("SLUICE_LAG_BIN is not set: it names the sluice-lag binary whose engine is checked (deploy/local/test.sh conformance sets it)")
	}
	for _, path := range loadCases(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var c hpaCase
			if err := json.Unmarshal(raw, &c); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			real := runController(t, &c)
			ours := runEngine(t, bin, path)
			compare(t, real, ours)
		})
	}
}

func runEngine(t *testing.T, bin, path string) []syncRecord {
	out, err := exec.Command(bin, "simulate", "hpa-case", path).Output()
	if err != nil {
		stderr := ""
		if e, ok := err.(*exec.ExitError); ok {
			stderr = string(e.Stderr)
		}
		t.Fatalf("%s simulate hpa-case %s: %v\n%s", bin, path, err, stderr)
	}
	var records []syncRecord
	if err := json.Unmarshal(out, &records); err != nil {
		t.Fatalf("the engine's output is not a timeline: %v\n%s", err, out)
	}
	return records
}

func compare(t *testing.T, real, ours []syncRecord) {
	t.Logf("%d syncs; the controller scaled %d times", len(real), rescales(real))
	if len(real) < 10 {
		t.Fatalf("only %d syncs of the real controller: the harness did not drive it", len(real))
	}
	for i := 0; i < len(real) || i < len(ours); i++ {
		if i >= len(real) || i >= len(ours) {
			t.Fatalf("sync %d: the controller made %d syncs, the engine %d", i, len(real), len(ours))
		}
		if real[i] != ours[i] {
			t.Fatalf("sync %d differs:\n  kubernetes: %+v\n  sluice:     %+v", i, real[i], ours[i])
		}
	}
}

func rescales(records []syncRecord) int {
	n := 0
	for _, r := range records {
		if r.After != r.Before {
			n++
		}
	}
	return n
}

// runController drives the real controller through the whole trace on a fake clock.
func runController(t *testing.T, c *hpaCase) []syncRecord {
	var records []syncRecord
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var mu sync.Mutex
		replicas := c.InitialReplicas
		var pending *syncRecord

		hpa := buildHPA(c)
		client := fake.NewSimpleClientset(hpa)
		scales := scaleClient(&mu, &replicas, func(before, after int32) {
			pending.After = after
		})
		metrics := &emfake.FakeExternalMetricsClient{}
		metrics.AddReactor("list", "*", func(core.Action) (bool, runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			now := time.Since(start)
			value := c.metricAt(now)
			if pending != nil {
				records = append(records, *pending)
			}
			pending = &syncRecord{AtMs: now.Milliseconds(), MetricMilli: value, Before: replicas, After: replicas}
			return true, &emapi.ExternalMetricValueList{Items: []emapi.ExternalMetricValue{{
				MetricName: metricName,
				Timestamp:  metav1.Time{Time: time.Now()},
				Value:      *resource.NewMilliQuantity(value, resource.DecimalSI),
			}}}, nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		factory := informers.NewSharedInformerFactory(client, controller.NoResyncPeriodFunc())
		hpaController := podautoscaler.NewHorizontalController(
			ctx,
			client.CoreV1(),
			scales,
			client.AutoscalingV2(),
			testrestmapper.TestOnlyStaticRESTMapper(legacyscheme.Scheme),
			metricsclient.NewRESTMetricsClient(
				(&metricsfake.Clientset{}).MetricsV1beta1(),
				&cmfake.FakeCustomMetricsClient{},
				metrics,
			),
			factory.Autoscaling().V2().HorizontalPodAutoscalers(),
			factory.Core().V1().Pods(),
			time.Duration(c.SyncPeriodS)*time.Second,
			time.Duration(c.DownscaleWindowS)*time.Second,
			c.Tolerance,
			30*time.Second,
			5*time.Minute,
		)
		factory.Start(ctx.Done())
		done := make(chan struct{})
		go func() {
			hpaController.Run(ctx, 1)
			close(done)
		}()
		time.Sleep(time.Duration(c.DurationS)*time.Second + time.Second)
		cancel()
		<-done
		factory.Shutdown()
		synctest.Wait()
		mu.Lock()
		if pending != nil {
			records = append(records, *pending)
		}
		mu.Unlock()
	})
	return records
}

// buildHPA is the HorizontalPodAutoscaler KEDA creates for one external trigger, with the API
// server's defaulting applied (the fake clientset stores objects as given).
func buildHPA(c *hpaCase) *autoscalingv2.HorizontalPodAutoscaler {
	minReplicas := c.MinReplicas
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: hpaName, Namespace: namespace},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: "Deployment", Name: deployment, APIVersion: "apps/v1"},
			MinReplicas:    &minReplicas,
			MaxReplicas:    c.MaxReplicas,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ExternalMetricSourceType,
				External: &autoscalingv2.ExternalMetricSource{
					Metric: autoscalingv2.MetricIdentifier{Name: metricName},
					Target: autoscalingv2.MetricTarget{
						Type:         autoscalingv2.AverageValueMetricType,
						AverageValue: resource.NewMilliQuantity(c.TargetAverageMilli, resource.DecimalSI),
					},
				},
			}},
			Behavior: c.Behavior,
		},
	}
	autoscalingapiv2.SetObjectDefaults_HorizontalPodAutoscaler(hpa)
	return hpa
}

// scaleClient is the Deployment's scale subresource: every pod the HPA asks for is there at once
// (status.replicas follows spec.replicas), which is what an open-loop trace assumes.
func scaleClient(mu *sync.Mutex, replicas *int32, onUpdate func(before, after int32)) *scalefake.FakeScaleClient {
	scales := &scalefake.FakeScaleClient{}
	scales.AddReactor("get", "deployments", func(core.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		return true, &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Name: deployment, Namespace: namespace},
			Spec:       autoscalingv1.ScaleSpec{Replicas: *replicas},
			Status:     autoscalingv1.ScaleStatus{Replicas: *replicas, Selector: "app=processor"},
		}, nil
	})
	scales.AddReactor("update", "deployments", func(action core.Action) (bool, runtime.Object, error) {
		obj := action.(core.UpdateAction).GetObject().(*autoscalingv1.Scale)
		mu.Lock()
		defer mu.Unlock()
		onUpdate(*replicas, obj.Spec.Replicas)
		*replicas = obj.Spec.Replicas
		return true, obj, nil
	})
	return scales
}
