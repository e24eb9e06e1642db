package main

import (
	"log/slog"

	"k8s.io/klog/v2"

	"github.com/shoal-dev/shoal/discoveryerr"
)

// routeClientGoLogs sends client-go's klog output (kubernetes_sd_configs'
// informers) through shoal's logger, in its format and at its level, and
// records the informers' refusals in rec for the status page: client-go
// reports them nowhere else.
func routeClientGoLogs(logger *slog.Logger, rec *discoveryerr.Recorder) {
	h := logger.With("component", "kubernetes client").Handler()
	klog.SetSlogLogger(slog.New(discoveryerr.ClientGoHandler(h, rec)))
}

// discoveryErrors is what the status page shows: the cluster's peer
// discovery errors, then target discovery's.
func (a *agent) discoveryErrors() []discoveryerr.Error {
	var out []discoveryerr.Error
	if a.node != nil {
		out = a.node.DiscoveryErrors()
	}
	return append(out, a.targetDiscErrs.Errors()...)
}
