package k8stest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// OperatorModule is the Prometheus Operator module whose CRD manifests
// the tests install (the only version of its root module the proxy serves).
const OperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

// OperatorCRDFiles returns the operator's full CRD manifests for
// ServiceMonitor, PodMonitor, Probe and ScrapeConfig from the module
// cache, downloading the module through the proxy if needed.
func OperatorCRDFiles() ([]string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", OperatorModule).Output()
	if err != nil {
		return nil, fmt.Errorf("go mod download %s: %w", OperatorModule, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return nil, fmt.Errorf("go mod download %s: no module directory in %q", OperatorModule, out)
	}
	dir := filepath.Join(mod.Dir, "example", "prometheus-operator-crd-full")
	var files []string
	for _, r := range []string{"servicemonitors", "podmonitors", "probes", "scrapeconfigs"} {
		files = append(files, filepath.Join(dir, "monitoring.coreos.com_"+r+".yaml"))
	}
	return files, nil
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs creates the CustomResourceDefinitions in the YAML files and
// waits until the API server serves them (condition Established).
func (c *ControlPlane) InstallCRDs(ctx context.Context, files ...string) error {
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	var names []string
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{}
		err = utilyaml.NewYAMLOrJSONDecoder(fh, 64<<10).Decode(&u.Object)
		fh.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if _, err := dyn.Resource(crdGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the CRD in %s: %w", f, err)
		}
		names = append(names, u.GetName())
	}
	for _, n := range names {
		err := c.apiserver.waitUntil(time.Minute, "CRD "+n+" established", func() error {
			u, err := dyn.Resource(crdGVR).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, cd := range conds {
				m, _ := cd.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
			return fmt.Errorf("not established yet")
		})
		if err != nil {
			return err
		}
	}
	return nil
}
