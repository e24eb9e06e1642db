//go:build !race

// Built without -race only: with the other operator-fidelity tests it needs
// every service discovery registered (discovery/install, which golden_test.go
// imports) and starts no goroutine; make test-unit runs the package a second
// time without -race for them, which spares a cold machine a race build of
// the cloud SDKs.

package monitors_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/shoal-dev/shoal/monitors"
)

type validationCase struct {
	// Kind is the object's kind; empty means ScrapeConfig.
	Kind     string `json:"kind"`
	Scenario string `json:"scenario"`
	// Valid is the operator's verdict on the object.
	Valid bool `json:"valid"`
	// Differs says why shoal's verdict is the other one.
	Differs string `json:"differs"`
	// Error is what shoal's refusal says.
	Error string `json:"error"`
	// Completed names the fields added to the operator's object (see
	// testdata/validation.yaml).
	Completed string          `json:"completed"`
	Spec      json.RawMessage `json:"spec"`
}

type validationFile struct {
	// Stores holds the Secrets and ConfigMaps of each kind's test.
	Stores map[string]goldenStore `json:"stores"`
	Cases  []validationCase       `json:"cases"`
}

// objects decodes the case's spec into an object of its kind.
func (tc validationCase) objects(t *testing.T) monitors.Objects {
	t.Helper()
	meta := metav1.ObjectMeta{Name: "test", Namespace: "test"}
	var objs monitors.Objects
	var spec any
	switch tc.kind() {
	case monitors.KindScrapeConfig:
		o := &monitoringv1alpha1.ScrapeConfig{ObjectMeta: meta}
		objs.ScrapeConfigs, spec = append(objs.ScrapeConfigs, o), &o.Spec
	case monitors.KindServiceMonitor:
		o := &monitoringv1.ServiceMonitor{ObjectMeta: meta}
		objs.ServiceMonitors, spec = append(objs.ServiceMonitors, o), &o.Spec
	case monitors.KindPodMonitor:
		o := &monitoringv1.PodMonitor{ObjectMeta: meta}
		objs.PodMonitors, spec = append(objs.PodMonitors, o), &o.Spec
	case monitors.KindProbe:
		o := &monitoringv1.Probe{ObjectMeta: meta}
		objs.Probes, spec = append(objs.Probes, o), &o.Spec
	default:
		t.Fatalf("unknown kind %q", tc.Kind)
	}
	if err := sigsyaml.UnmarshalStrict(tc.Spec, spec); err != nil {
		t.Fatal(err)
	}
	return objs
}

func (tc validationCase) kind() string {
	if tc.Kind == "" {
		return monitors.KindScrapeConfig
	}
	return tc.Kind
}

// TestOperatorValidation converts the objects of the operator's own
// validation tests (TestSelectScrapeConfigs, TestSelectServiceMonitors,
// TestSelectPodMonitors and TestSelectProbes in pkg/prometheus of the module
// TestOperatorGolden reads) and checks that shoal accepts what the operator
// accepts and refuses, with an error naming the field, what it refuses;
// except where a case says why shoal differs.
func TestOperatorValidation(t *testing.T) {
	raw, err := os.ReadFile("testdata/validation.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var vf validationFile
	if err := sigsyaml.UnmarshalStrict(raw, &vf); err != nil {
		t.Fatal(err)
	}
	for _, tc := range vf.Cases {
		t.Run(tc.kind()+"/"+tc.Scenario, func(t *testing.T) {
			st := vf.Stores[tc.kind()]
			res := mapResolver{secrets: readFiles(st.Secrets), configMaps: readFiles(st.ConfigMaps)}
			objs := tc.objects(t)
			if tc.Valid == (tc.Differs == "") {
				r := monitors.Convert(context.Background(), objs, res, monitors.Options{})
				if len(r.Errors) != 0 {
					t.Fatalf("refused: %v", r.Errors)
				}
				return
			}
			if tc.Error == "" {
				t.Fatal("a refused case names the error it expects")
			}
			assertRefused(t, objs, res, tc.Error)
		})
	}
}
