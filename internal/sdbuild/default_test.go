//go:build !full_sd

package sdbuild

import (
	"errors"
	"strings"
	"testing"
)

func TestExplainNamesTheLeftOutDiscoveryAndWhereItIs(t *testing.T) {
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
