package monitors_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/shoal-dev/shoal/internal/k8stest"
	"github.com/shoal-dev/shoal/internal/testutil"
	"github.com/shoal-dev/shoal/monitors"
)

// TestKubernetesWatcherRereadsReferencedSecrets: against a real API server, a
// ServiceMonitor's basic-auth Secret changes while the ServiceMonitor does
// not; the new password reaches the generated job within a few resyncs. A
// deleted Secret does not drop the job that scrapes (several resyncs pass,
// counted as kept), a re-created one is read again, and a change of the
// object itself still rejects it for the missing Secret.
func TestKubernetesWatcherRereadsReferencedSecrets(t *testing.T) {
	cp := k8stest.StartForTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	files, err := k8stest.OperatorCRDFiles()
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.InstallCRDs(ctx, files...); err != nil {
		t.Fatal(err)
	}
	if err := cp.CreateNamespace(ctx, "apps"); err != nil {
		t.Fatal(err)
	}
	secrets := cp.Client.CoreV1().Secrets("apps")
	setPassword := func(pass string) {
		t.Helper()
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "auth", Namespace: "apps"},
			Data:       map[string][]byte{"user": []byte("alice"), "pass": []byte(pass)},
		}
		if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	setPassword("first")
	createYAML(t, dyn, smGVR, `
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: web, namespace: apps}
spec:
  selector: {matchLabels: {app: web}}
  endpoints:
  - port: metrics
    basicAuth: {username: {name: auth, key: user}, password: {name: auth, key: pass}}
`)

	const resync = 300 * time.Millisecond
	reg := prometheus.NewRegistry()
	w, err := monitors.NewWatcher(dyn, cp.Client, monitors.WatchOptions{Debounce: 100 * time.Millisecond, Resync: resync}, promslog.NewNopLogger(), reg)
	if err != nil {
		t.Fatal(err)
	}
	var got latest
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx, got.set) }()
	defer func() { cancel(); <-done }()

	password := func(want string) func() error {
		return func() error {
			r, _ := got.get()
			if r == nil || jobSources(r) != "serviceMonitor/apps/web/0" || !strings.Contains(string(r.YAML()), "password: "+want) {
				return fmt.Errorf("jobs %s, want serviceMonitor/apps/web/0 with password %s", jobSources(r), want)
			}
			return nil
		}
	}
	testutil.Eventually(t, time.Minute, "the first password", password("first"))

	// Only the Secret changes: no event reaches the watcher.
	setPassword("second")
	testutil.Eventually(t, 30*time.Second, "the changed password without a change of the ServiceMonitor", password("second"))

	// The Secret goes away: resyncs keep the job in force and count it.
	if err := secrets.Delete(ctx, "auth", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "three resyncs kept the job", func() error {
		if v, err := testutil.GatherValue(reg, "shoal_monitors_resync_kept_total", nil); err != nil || v < 3 {
			return fmt.Errorf("shoal_monitors_resync_kept_total = %v, %v; want >= 3", v, err)
		}
		return nil
	})
	if err := password("second")(); err != nil {
		t.Fatalf("after the Secret was deleted: %v", err)
	}
	if v, err := testutil.GatherValue(reg, "shoal_monitors_objects", map[string]string{"kind": monitors.KindServiceMonitor, "result": "converted"}); err != nil || v != 1 {
		t.Errorf("shoal_monitors_objects{converted} = %v, %v; want 1 while the job is kept", v, err)
	}

	// Re-created, it is read again.
	setPassword("third")
	testutil.Eventually(t, 30*time.Second, "the re-created Secret's password", password("third"))

	// A change of the object is converted as always: with the Secret gone,
	// the object is rejected, naming the Secret.
	if err := secrets.Delete(ctx, "auth", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	u, err := dyn.Resource(smGVR).Namespace("apps").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u.SetLabels(map[string]string{"touched": "yes"})
	if _, err := dyn.Resource(smGVR).Namespace("apps").Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the changed object rejected for its missing Secret", func() error {
		r, _ := got.get()
		if jobSources(r) != "rejected ServiceMonitor apps/web" || !strings.Contains(r.Errors[0].Error(), "auth") {
			return fmt.Errorf("jobs %s", jobSources(r))
		}
		return nil
	})
}
