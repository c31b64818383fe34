package keda

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v2 "k8s.io/api/autoscaling/v2"

	"github.com/kedacore/keda/v2/pkg/scalers"
	"github.com/kedacore/keda/v2/pkg/scalers/scalersconfig"
)

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startLag runs sluice-lag watching group, with its scaler on a port of its own, until the
// test ends; returns the scaler's address once a poll has completed.
func startLag(t *testing.T, group string, extraEnv ...string) string {
	admin, scaler := freePort(t), freePort(t)
	cmd := exec.Command(lagBin(t))
	// sluice-lag refuses SLUICE_LAG_ variables it does not know, and SLUICE_LAG_BIN is ours.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLUICE_LAG_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env,
		"SLUICE_LAG_BROKERS="+brokers(t),
		"SLUICE_LAG_GROUPS="+group+",conformance-not-a-member",
		"SLUICE_LAG_POLL_INTERVAL_MS=500",
		"SLUICE_LAG_RATE_WINDOW_MS=2000",
		"SLUICE_LAG_ADMIN_LISTEN="+admin,
		"SLUICE_LAG_SCALER_LISTEN="+scaler,
	)
	cmd.Env = append(cmd.Env, extraEnv...)
	logFile, err := os.Create(filepath.Join(t.TempDir(), "sluice-lag.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			exited <- err
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("sluice-lag exited (%v):\n%s", err, log)
		default:
		}
		if resp, err := http.Get("http://" + admin + "/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return scaler
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	log, _ := os.ReadFile(logFile.Name())
	t.Fatalf("sluice-lag was not ready in 30 s:\n%s", log)
	return ""
}

// kedaScaler is KEDA's own external scaler client for one ScaledObject's trigger.
func kedaScaler(t *testing.T, metadata, auth map[string]string) scalers.Scaler {
	s, err := scalers.NewExternalScaler(&scalersconfig.ScalerConfig{
		ScalableObjectName:      "processor",
		ScalableObjectNamespace: "sluice",
		TriggerMetadata:         metadata,
		AuthParams:              auth,
		GlobalHTTPTimeout:       10 * time.Second,
		MetricType:              v2.AverageValueMetricType,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// TestExternalScalerThroughKedaClient: KEDA's client asks sluice-lag's scaler for the metric
// spec, the metric and the activity of a group whose lag is known.
func TestExternalScalerThroughKedaClient(t *testing.T) {
	_, group := setUp(t, "keda-external")
	address := startLag(t, group)
	ctx := context.Background()
	// 605 records of lag (100 + 0 + 30 + 0 + 75 + 400, the uncommitted partitions whole):
	// 605 / 150 = 4.03, so 5 pods; with 6 partitions 5 pods relieve no one 3 do not.
	s := kedaScaler(t, map[string]string{"scalerAddress": address, "group": group, "trigger": "offsetLag", "lagThreshold": "150"}, nil)
	specs := s.GetMetricSpecForScaling(ctx)
	if len(specs) != 1 {
		t.Fatalf("metric specs: %+v", specs)
	}
	want := "s0-sluice-" + strings.ReplaceAll(group, "_", "-") + "-offset-lag"
	if got := specs[0].External.Metric.Name; got != want {
		t.Fatalf("metric name %q, want %q", got, want)
	}
	if target := specs[0].External.Target; target.Type != v2.AverageValueMetricType || target.AverageValue.MilliValue() != 1000 {
		t.Fatalf("target %+v, want AverageValue 1", target)
	}
	var value int64
	var active bool
	deadline := time.Now().Add(15 * time.Second)
	for {
		metrics, a, err := s.GetMetricsAndActivity(ctx, want)
		if err == nil {
			value, active = metrics[0].Value.MilliValue(), a
			if value == 3000 || time.Now().After(deadline) {
				break
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("GetMetricsAndActivity: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if value != 3000 || !active {
		t.Fatalf("metric %d milli, active %v; want 3000 (3 replicas) and active", value, active)
	}
	t.Logf("KEDA's client read %s = %d milli (3 replicas), active", want, value)

	// A group this sluice-lag does not watch: an error, never a zero.
	unwatched := kedaScaler(t, map[string]string{"scalerAddress": address, "group": "conformance-unwatched", "trigger": "timeLag", "targetSeconds": "30"}, nil)
	name := unwatched.GetMetricSpecForScaling(ctx)[0].External.Metric.Name
	if _, _, err := unwatched.GetMetricsAndActivity(ctx, name); err == nil || !strings.Contains(err.Error(), "not watched") {
		t.Fatalf("an unwatched group: %v, want an error saying so", err)
	}
	// A misspelled setting is refused by name.
	typo := kedaScaler(t, map[string]string{"scalerAddress": address, "group": group, "lagTreshold": "5"}, nil)
	if _, _, err := typo.GetMetricsAndActivity(ctx, want); err == nil || !strings.Contains(err.Error(), "lagTreshold") {
		t.Fatalf("a misspelled key: %v, want an error naming it", err)
	}
}

// certificates makes a CA, a server certificate for 127.0.0.1 and a client certificate (PEM
// files in a temporary directory).
func certificates(t *testing.T) string {
	dir := t.TempDir()
	write := func(name, kind string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := key()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "conformance-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	write("ca.crt", "CERTIFICATE", caDER)
	for i, who := range []string{"server", "client"} {
		k := key()
		leaf := &x509.Certificate{
			SerialNumber: big.NewInt(int64(2 + i)), Subject: pkix.Name{CommonName: who},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		write(who+".crt", "CERTIFICATE", der)
		write(who+".key", "PRIVATE KEY", keyDER)
	}
	return dir
}

func read(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestExternalScalerOverMutualTLS: KEDA's client with the CA and a client certificate is served;
// without a client certificate the handshake is refused.
func TestExternalScalerOverMutualTLS(t *testing.T) {
	_, group := setUp(t, "keda-tls")
	dir := certificates(t)
	address := startLag(t, group,
		"SLUICE_LAG_SCALER_TLS_CERT="+filepath.Join(dir, "server.crt"),
		"SLUICE_LAG_SCALER_TLS_KEY="+filepath.Join(dir, "server.key"),
		"SLUICE_LAG_SCALER_TLS_CLIENT_CA="+filepath.Join(dir, "ca.crt"),
	)
	ctx := context.Background()
	meta := map[string]string{"scalerAddress": address, "group": group, "lagThreshold": "150", "enableTLS": "true"}
	auth := map[string]string{
		"caCert":        read(t, filepath.Join(dir, "ca.crt")),
		"tlsClientCert": read(t, filepath.Join(dir, "client.crt")),
		"tlsClientKey":  read(t, filepath.Join(dir, "client.key")),
	}
	s := kedaScaler(t, meta, auth)
	name := s.GetMetricSpecForScaling(ctx)[0].External.Metric.Name
	metrics, _, err := s.GetMetricsAndActivity(ctx, name)
	if err != nil {
		t.Fatalf("over mutual TLS: %v", err)
	}
	t.Logf("over mutual TLS: %s = %d milli", name, metrics[0].Value.MilliValue())
	// A distinct address string keeps KEDA's connection pool (keyed by address and TLS files) apart.
	anonymous := kedaScaler(t, map[string]string{"scalerAddress": "dns:///" + address, "group": group, "enableTLS": "true"},
		map[string]string{"caCert": auth["caCert"]})
	if _, _, err := anonymous.GetMetricsAndActivity(ctx, name); err == nil {
		t.Fatal("a client without a certificate was served")
	} else {
		t.Logf("without a client certificate: %v", fmt.Sprint(err)[:min(len(fmt.Sprint(err)), 120)])
	}
}
