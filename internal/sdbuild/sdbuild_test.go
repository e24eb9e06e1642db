package sdbuild

import (
	"errors"
	"slices"
	"strings"
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

func TestExplainNamesTheLeftOutDiscoveryAndWhereItIs(t *testing.T) {
	if Full() {
		t.Skip("the full build leaves nothing out")
	}
	err := decode("ec2_sd_configs: [{region: eu-west-1}]\nazure_sd_configs: [{subscription_id: x}]\n")
	if err == nil {
		t.Fatal("the default build accepted ec2_sd_configs")
	}
	got := Explain(err)
	for _, want := range []string{"ec2_sd_configs, azure_sd_configs: not in this build", "kubernetes_sd_configs", "-full", "-tags full_sd"} {
		if !strings.Contains(got.Error(), want) {
			t.Errorf("explained error %q lacks %q", got, want)
		}
	}
	if !errors.Is(got, err) {
		t.Error("the explanation does not wrap the decoder's error")
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
