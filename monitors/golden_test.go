package monitors_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/config"
	_ "github.com/prometheus/prometheus/discovery/install"
	"go.yaml.in/yaml/v2"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/shoal-dev/shoal/monitors"
)

// operatorModule is the root module of the Prometheus Operator whose
// golden files the conversion is compared with. It is the newest the
// module proxy serves.
const operatorModule = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

type goldenCase struct {
	Golden          string                             `json:"golden"`
	Fragment        string                             `json:"fragment"`
	Secrets         map[string]map[string]string       `json:"secrets"`
	ConfigMaps      map[string]map[string]string       `json:"configMaps"`
	ServiceMonitors []*monitoringv1.ServiceMonitor     `json:"serviceMonitors"`
	PodMonitors     []*monitoringv1.PodMonitor         `json:"podMonitors"`
	Probes          []*monitoringv1.Probe              `json:"probes"`
	ScrapeConfigs   []*monitoringv1alpha1.ScrapeConfig `json:"scrapeConfigs"`
}

type goldenFile struct {
	Secrets    map[string]map[string]string `json:"secrets"`
	ConfigMaps map[string]map[string]string `json:"configMaps"`
	Cases      []goldenCase                 `json:"cases"`
}

// operatorTestdata returns the operator's pkg/prometheus/testdata directory
// from the module cache, downloading the module through the proxy if needed.
func operatorTestdata(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", operatorModule).Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v (the golden comparison needs the operator's module from the module proxy)", operatorModule, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download %s: no module directory in %q", operatorModule, out)
	}
	return filepath.Join(mod.Dir, "pkg", "prometheus", "testdata")
}

// TestOperatorGolden converts objects rebuilt from the operator's tests and
// compares the result with the scrape configs the operator's generator wrote
// for them. Normalisation, for the intentional differences:
//   - the operator's sharding rules (__tmp_hash, hashmod, $(SHARD)) are
//     removed from its output: shoal shards with its ring;
//   - TLS files the operator writes from Secrets
//     (/etc/prometheus/certs/<n>_<namespace>_<name>_<key>) are replaced by
//     the inline value shoal puts in the config;
//   - both sides are parsed by Prometheus (config.Load) and rendered again,
//     so defaults and key order do not count.
func TestOperatorGolden(t *testing.T) {
	dir := operatorTestdata(t)
	raw, err := os.ReadFile("testdata/golden.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var gf goldenFile
	if err := sigsyaml.UnmarshalStrict(raw, &gf); err != nil {
		t.Fatal(err)
	}
	for _, tc := range gf.Cases {
		t.Run(strings.TrimSuffix(tc.Golden, ".golden"), func(t *testing.T) {
			// A case's own Secrets and ConfigMaps replace the shared ones
			// of the same name, as the operator's tests use different stores.
			res := mapResolver{secrets: merge(gf.Secrets, tc.Secrets), configMaps: merge(gf.ConfigMaps, tc.ConfigMaps)}
			r := mustConvert(t, monitors.Objects{
				ServiceMonitors: tc.ServiceMonitors, PodMonitors: tc.PodMonitors,
				Probes: tc.Probes, ScrapeConfigs: tc.ScrapeConfigs,
			}, res)
			golden, err := os.ReadFile(filepath.Join(dir, tc.Golden))
			if err != nil {
				t.Fatal(err)
			}
			if tc.Fragment != "" {
				compareFragment(t, tc.Fragment, golden, r)
				return
			}
			var doc struct {
				ScrapeConfigs []yaml.MapSlice `yaml:"scrape_configs"`
			}
			if err := yaml.Unmarshal(golden, &doc); err != nil {
				t.Fatal(err)
			}
			for i := range doc.ScrapeConfigs {
				doc.ScrapeConfigs[i] = inlineTLSFiles(t, stripSharding(doc.ScrapeConfigs[i]), res.secrets)
			}
			want := loadJobs(t, mustMarshal(t, map[string]any{"scrape_configs": doc.ScrapeConfigs}))
			got := loadJobs(t, r.YAML())
			if len(got) != len(want) {
				t.Fatalf("got %d jobs, operator has %d", len(got), len(want))
			}
			for name, w := range want {
				if g, ok := got[name]; !ok {
					t.Errorf("job %s missing", name)
				} else if g != w {
					t.Errorf("job %s differs from the operator's\n--- shoal\n%s\n--- operator\n%s", name, g, w)
				}
			}
		})
	}
}

func merge(base, over map[string]map[string]string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// loadJobs loads a scrape_configs document with Prometheus' config.Load and
// returns each job rendered back to YAML, by job name.
func loadJobs(t *testing.T, scrapeConfigs []byte) map[string]string {
	t.Helper()
	doc := "global:\n  scrape_interval: 30s\n  evaluation_interval: 30s\n" + string(scrapeConfigs)
	cfg, err := config.Load(doc, promslog.NewNopLogger())
	if err != nil {
		t.Fatalf("config.Load: %v\n%s", err, doc)
	}
	out := map[string]string{}
	for _, sc := range cfg.ScrapeConfigs {
		out[sc.JobName] = string(mustMarshal(t, sc))
	}
	return out
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// stripSharding removes the operator's per-shard relabel rules.
func stripSharding(job yaml.MapSlice) yaml.MapSlice {
	for i, it := range job {
		if it.Key != "relabel_configs" {
			continue
		}
		var kept []any
		for _, rc := range it.Value.([]any) {
			if !strings.Contains(fmt.Sprint(rc), "__tmp_hash") {
				kept = append(kept, rc)
			}
		}
		job[i].Value = kept
	}
	return job
}

var certFile = regexp.MustCompile(`^/etc/prometheus/certs/\d+_([^_]+)_([^_]+)_(.+)$`)

// inlineTLSFiles replaces TLS file paths the operator derives from Secrets
// by the Secrets' values, walking the whole job.
func inlineTLSFiles(t *testing.T, v yaml.MapSlice, secrets map[string]map[string]string) yaml.MapSlice {
	for i, it := range v {
		switch val := it.Value.(type) {
		case yaml.MapSlice:
			v[i].Value = inlineTLSFiles(t, val, secrets)
		case []any:
			for j, e := range val {
				if m, ok := e.(yaml.MapSlice); ok {
					val[j] = inlineTLSFiles(t, m, secrets)
				}
			}
		case string:
			k, _ := it.Key.(string)
			m := certFile.FindStringSubmatch(val)
			if m == nil || !strings.HasSuffix(k, "_file") {
				continue
			}
			s, ok := secrets[m[1]+"/"+m[2]][m[3]]
			if !ok {
				t.Fatalf("golden names %s, which is not among the test's secrets", val)
			}
			v[i] = yaml.MapItem{Key: strings.TrimSuffix(k, "_file"), Value: s}
		}
	}
	return v
}

// compareFragment compares one top-level key of the only generated job with
// a golden file holding just that key.
func compareFragment(t *testing.T, key string, golden []byte, r *monitors.Result) {
	t.Helper()
	if len(r.Jobs) != 1 {
		t.Fatalf("got %d jobs, want 1", len(r.Jobs))
	}
	var job map[string]any
	if err := yaml.Unmarshal(r.Jobs[0].YAML, &job); err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(golden, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(map[string]any{key: job[key]}, want) {
		t.Errorf("%s differs from the operator's\n--- shoal\n%s--- operator\n%s", key, mustMarshal(t, map[string]any{key: job[key]}), bytes.TrimSpace(golden))
	}
}
