//go:build slim_sd

package main

// A build with -tags slim_sd keeps only the discoveries most deployments
// use (static_configs are always there). The others' packages (cloud SDKs
// above all) cost resident memory in every replica even when unused: a
// replica with 10 targets measured 94 MB RSS with all of them and 60 MB
// with this set, mostly the binary's mapped pages (72 -> 44 MB) and the
// heap their package initialisation leaves (18 -> 10 MB). A configuration
// using another discovery is refused at load ("field ... not found").
import (
	_ "github.com/prometheus/prometheus/discovery/consul"
	_ "github.com/prometheus/prometheus/discovery/dns"
	_ "github.com/prometheus/prometheus/discovery/file"
	_ "github.com/prometheus/prometheus/discovery/http"
	_ "github.com/prometheus/prometheus/discovery/kubernetes"
)
