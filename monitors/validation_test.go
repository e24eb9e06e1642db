package monitors_test

import (
	"context"
	"os"
	"testing"

	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/shoal-dev/shoal/monitors"
)

type validationCase struct {
	Scenario string `json:"scenario"`
	// Valid is the operator's verdict on the object.
	Valid bool `json:"valid"`
	// Differs says why shoal's verdict is the other one.
	Differs string `json:"differs"`
	// Error is what shoal's refusal says.
	Error string `json:"error"`
	// Completed names the fields added to the operator's object (see
	// testdata/validation.yaml).
	Completed string                              `json:"completed"`
	Spec      monitoringv1alpha1.ScrapeConfigSpec `json:"spec"`
}

type validationFile struct {
	Secrets    map[string]map[string]string `json:"secrets"`
	ConfigMaps map[string]map[string]string `json:"configMaps"`
	Cases      []validationCase             `json:"cases"`
}

// TestOperatorValidation converts the ScrapeConfigs of the operator's own
// validation test (TestSelectScrapeConfigs in pkg/prometheus of the module
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
	res := mapResolver{secrets: readFiles(vf.Secrets), configMaps: vf.ConfigMaps}
	for _, tc := range vf.Cases {
		t.Run(tc.Scenario, func(t *testing.T) {
			objs := monitors.Objects{ScrapeConfigs: []*monitoringv1alpha1.ScrapeConfig{{
				ObjectMeta: metav1.ObjectMeta{Name: "test", Namespace: "test"},
				Spec:       tc.Spec,
			}}}
			if tc.Valid == (tc.Differs == "") {
				r := monitors.Convert(context.Background(), objs, res, monitors.Options{})
				if len(r.Errors) != 0 || len(r.Jobs) != 1 {
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
