// Package sdbuild is the set of service discoveries compiled into this
// build of shoal, and the explanation of a configuration that names one
// left out.
//
// The default build keeps the discoveries a Kubernetes deployment uses:
// kubernetes, file, DNS, HTTP and Consul (static targets are always
// there). Built with -tags full_sd (the image tagged with the suffix
// -full) it has every discovery Prometheus has. The others' packages,
// the cloud SDKs above all, cost every replica memory even when no job
// uses them: mostly the binary's pages their initialisation touches and
// the data it leaves on the heap (a replica with 10 targets idled at
// about 90 MiB RSS with all of them and about 60 MiB without).
//
// Importing the package registers the set with Prometheus' discovery
// registry, so the binary imports it once and a package that only
// explains errors gets the same set.
package sdbuild

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Names are the discoveries of this build, by the prefix of their
// <name>_sd_configs field, sorted.
func Names() []string {
	if full {
		return slices.Clone(all)
	}
	return slices.Clone(kept)
}

// kept are the discoveries of the default build (default.go imports
// their packages).
var kept = []string{"consul", "dns", "file", "http", "kubernetes"}

// all are the discoveries of the full build: every one that Prometheus'
// discovery/install registers (full.go imports it).
var all = []string{
	"aws", "azure", "consul", "digitalocean", "dns", "docker", "dockerswarm",
	"ec2", "ecs", "elasticache", "eureka", "file", "gce", "hetzner", "http",
	"ionos", "kubernetes", "kuma", "lightsail", "linode", "marathon", "msk",
	"nerve", "nomad", "oci", "openstack", "outscale", "ovhcloud", "puppetdb",
	"rds", "scaleway", "serverset", "stackit", "triton", "uyuni", "vultr",
}

// unknownSD matches the YAML decoder's complaint about a field of a
// scrape configuration that no registered discovery declares.
var unknownSD = regexp.MustCompile(`field ([a-z0-9]+)_sd_configs not found in type`)

// Explain adds to a configuration error that names a discovery left out
// of this build where to find it. Any other error is returned as it is
// (a misspelt field name stays the decoder's "not found").
func Explain(err error) error {
	if err == nil || full {
		return err
	}
	var missing []string
	for _, m := range unknownSD.FindAllStringSubmatch(err.Error(), -1) {
		if _, known := slices.BinarySearch(all, m[1]); known && !slices.Contains(missing, m[1]+"_sd_configs") {
			missing = append(missing, m[1]+"_sd_configs")
		}
	}
	if len(missing) == 0 {
		return err
	}
	return fmt.Errorf("%w (%s: not in this build, which discovers targets with %s_sd_configs and static_configs; the full build has every Prometheus discovery: the image tagged with the suffix -full, or go build -tags full_sd)",
		err, strings.Join(missing, ", "), strings.Join(kept, "_sd_configs, "))
}
