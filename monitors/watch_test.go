package monitors_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/config"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/shoal-dev/shoal/internal/k8stest"
	"github.com/shoal-dev/shoal/internal/testutil"
	"github.com/shoal-dev/shoal/monitors"
)

var (
	smGVR = schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}
	pmGVR = schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "podmonitors"}
)

// latest keeps the last result a watcher applied.
type latest struct {
	mu sync.Mutex
	r  *monitors.Result
	n  int
}

func (l *latest) set(r *monitors.Result) { l.mu.Lock(); l.r = r; l.n++; l.mu.Unlock() }
func (l *latest) get() (*monitors.Result, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r, l.n
}

func jobSources(r *monitors.Result) string {
	if r == nil {
		return "<none>"
	}
	var s []string
	for _, j := range r.Jobs {
		s = append(s, j.Config.JobName)
	}
	for _, e := range r.Errors {
		s = append(s, "rejected "+e.Source.String())
	}
	return strings.Join(s, ",")
}

func createYAML(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, doc string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := sigsyaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(gvr).Namespace(u.GetNamespace()).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating %s %s/%s: %v", gvr.Resource, u.GetNamespace(), u.GetName(), err)
	}
}

// TestKubernetesWatcher runs the watcher against a real API server:
// started before the CRDs exist (counted, no crash, an empty first result),
// then objects created, filtered by selector and namespaces, changed,
// rejected for a missing Secret, and deleted.
func TestKubernetesWatcher(t *testing.T) {
	cp := k8stest.StartForTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	w, err := monitors.NewWatcher(dyn, cp.Client, monitors.WatchOptions{
		Selector:          "team=obs",
		ExcludeNamespaces: []string{"denied"},
		Debounce:          200 * time.Millisecond,
	}, promslog.NewNopLogger(), reg)
	if err != nil {
		t.Fatal(err)
	}
	var got latest
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx, got.set) }()
	defer func() { cancel(); <-done }()

	// No CRDs yet: the watcher still reports (no jobs) and counts the failure.
	testutil.EventuallyTrue(t, time.Minute, "a first result without CRDs", func() bool { _, n := got.get(); return n > 0 })
	if r, _ := got.get(); len(r.Jobs) != 0 {
		t.Fatalf("jobs without CRDs: %s", jobSources(r))
	}
	if v, err := testutil.GatherValue(reg, "shoal_monitors_watch_errors_total", map[string]string{"kind": monitors.KindServiceMonitor}); err != nil || v == 0 {
		t.Fatalf("shoal_monitors_watch_errors_total{kind=ServiceMonitor} = %v, %v; want > 0 without the CRD", v, err)
	}

	files, err := k8stest.OperatorCRDFiles()
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.InstallCRDs(ctx, files...); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"apps", "denied"} {
		if err := cp.CreateNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cp.Client.CoreV1().Secrets("apps").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "auth", Namespace: "apps"},
		Data:       map[string][]byte{"user": []byte("alice"), "pass": []byte("s3cret")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sm := func(ns, name, team, path, secret string) string {
		return fmt.Sprintf(`
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: %s, namespace: %s, labels: {team: %s}}
spec:
  selector: {matchLabels: {app: web}}
  endpoints:
  - port: metrics
    path: %s
    basicAuth: {username: {name: %s, key: user}, password: {name: %s, key: pass}}
`, name, ns, team, path, secret, secret)
	}
	createYAML(t, dyn, smGVR, sm("apps", "web", "obs", "/metrics", "auth"))
	createYAML(t, dyn, smGVR, sm("apps", "other-team", "billing", "/metrics", "auth"))
	createYAML(t, dyn, smGVR, sm("denied", "web", "obs", "/metrics", "auth"))
	createYAML(t, dyn, smGVR, sm("apps", "no-secret", "obs", "/metrics", "missing"))
	createYAML(t, dyn, pmGVR, `
apiVersion: monitoring.coreos.com/v1
kind: PodMonitor
metadata: {name: workers, namespace: apps, labels: {team: obs}}
spec:
  selector: {matchLabels: {app: worker}}
  podMetricsEndpoints: [{port: metrics}]
`)

	want := "podMonitor/apps/workers/0,serviceMonitor/apps/web/0,rejected ServiceMonitor apps/no-secret"
	// The reflectors back off while the CRDs are missing (up to 30s).
	testutil.Eventually(t, 2*time.Minute, "the selected objects converted", func() error {
		if r, _ := got.get(); jobSources(r) != want {
			return fmt.Errorf("jobs %s, want %s", jobSources(r), want)
		}
		return nil
	})
	r, _ := got.get()
	if !strings.Contains(string(r.YAML()), "password: s3cret") {
		t.Errorf("the Secret's password is not in the generated config:\n%s", r.YAML())
	}
	if e := r.Errors[0].Error(); !strings.Contains(e, `missing`) {
		t.Errorf("rejection %q does not name the missing Secret", e)
	}
	for kind, want := range map[[2]string]float64{
		{monitors.KindServiceMonitor, "converted"}: 1,
		{monitors.KindServiceMonitor, "rejected"}:  1,
		{monitors.KindPodMonitor, "converted"}:     1,
	} {
		if v, err := testutil.GatherValue(reg, "shoal_monitors_objects", map[string]string{"kind": kind[0], "result": kind[1]}); err != nil || v != want {
			t.Errorf("shoal_monitors_objects{kind=%s,result=%s} = %v, %v; want %v", kind[0], kind[1], v, err, want)
		}
	}

	// A change is picked up.
	u, err := dyn.Resource(smGVR).Namespace("apps").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eps, _, _ := unstructured.NestedSlice(u.Object, "spec", "endpoints")
	eps[0].(map[string]any)["path"] = "/changed"
	if err := unstructured.SetNestedSlice(u.Object, eps, "spec", "endpoints"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(smGVR).Namespace("apps").Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyTrue(t, time.Minute, "the changed metrics path", func() bool {
		r, _ := got.get()
		return strings.Contains(string(r.YAML()), "metrics_path: /changed")
	})

	// Deleted objects leave no job behind.
	for _, d := range []struct {
		gvr  schema.GroupVersionResource
		name string
	}{{smGVR, "web"}, {smGVR, "no-secret"}, {pmGVR, "workers"}} {
		if err := dyn.Resource(d.gvr).Namespace("apps").Delete(ctx, d.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, time.Minute, "no jobs after deletion", func() error {
		if r, _ := got.get(); jobSources(r) != "" {
			return fmt.Errorf("still %s", jobSources(r))
		}
		return nil
	})
}

func TestMergeRefusesAClashAndAppendsJobs(t *testing.T) {
	r := mustConvert(t, monitors.Objects{ServiceMonitors: decode[monitoringv1.ServiceMonitor](t, `
metadata: {name: web, namespace: apps}
spec:
  selector: {matchLabels: {app: web}}
  endpoints: [{port: metrics}]
`)}, testResolver)
	load := func(jobs ...string) *config.Config {
		t.Helper()
		var b strings.Builder
		b.WriteString("scrape_configs:\n")
		for _, j := range jobs {
			fmt.Fprintf(&b, "- job_name: %q\n  static_configs: [{targets: ['a:1']}]\n", j)
		}
		cfg, err := config.Load(b.String(), promslog.NewNopLogger())
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfg := load("file")
	if err := monitors.Merge(cfg, r, ""); err != nil {
		t.Fatal(err)
	}
	scs, err := cfg.GetScrapeConfigs()
	if err != nil {
		t.Fatal(err)
	}
	if len(scs) != 2 || scs[0].JobName != "file" || scs[1].JobName != "serviceMonitor/apps/web/0" || scs[1].ScrapeInterval == 0 {
		t.Fatalf("merged jobs %v, want file then serviceMonitor/apps/web/0 with the global interval filled in", scs)
	}
	err = monitors.Merge(load("serviceMonitor/apps/web/0"), r, "")
	if !errors.Is(err, monitors.ErrJobClash) || !strings.Contains(err.Error(), "ServiceMonitor apps/web") {
		t.Fatalf("Merge with a clashing file job: %v, want ErrJobClash naming the object", err)
	}
}
