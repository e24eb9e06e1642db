package sdbuild

import (
	"slices"
	"testing"

	"github.com/prometheus/prometheus/config"
	"go.yaml.in/yaml/v2"
)

// decode is how a configuration file's scrape job is read: strictly, so a
// field no registered discovery declares is an error.
func decode(src string) error {
	return yaml.UnmarshalStrict([]byte("job_name: j\n"+src), &config.ScrapeConfig{})
}

func TestListsAreSortedAndTheKeptSetIsPartOfTheFullOne(t *testing.T) {
	if !slices.IsSorted(all) || !slices.IsSorted(kept) {
		t.Fatal("all and kept must be sorted (Explain searches all)")
	}
	for _, n := range kept {
		if _, ok := slices.BinarySearch(all, n); !ok {
			t.Errorf("%s is kept but not in the full set", n)
		}
	}
}

// TestThisBuildRegistersEveryDiscoveryItNames: each name in Names is a
// field a scrape job may carry.
func TestThisBuildRegistersEveryDiscoveryItNames(t *testing.T) {
	for _, n := range Names() {
		if err := decode(n + "_sd_configs: []\n"); err != nil {
			t.Errorf("%s_sd_configs: %v", n, err)
		}
	}
}

func TestExplainLeavesAMisspeltFieldAlone(t *testing.T) {
	err := decode("kubernets_sd_configs: [{role: pod}]\n")
	if err == nil {
		t.Fatal("a misspelt discovery field was accepted")
	}
	if got := Explain(err); got != err {
		t.Errorf("a misspelt field was explained as a discovery of the full build: %v", got)
	}
	if Explain(nil) != nil {
		t.Error("Explain(nil) is not nil")
	}
}
