package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/alecthomas/kingpin/v2"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/shoal-dev/shoal/monitors"
	"github.com/shoal-dev/shoal/web"
)

// monitorFlags configure Prometheus Operator monitors as a config source.
type monitorFlags struct {
	enabled           bool
	selector          string
	namespaces        []string
	excludeNamespaces []string
}

func addMonitorFlags(app *kingpin.Application, m *monitorFlags) {
	app.Flag("kubernetes.monitors", "Watch the Prometheus Operator's ServiceMonitor, PodMonitor, Probe and ScrapeConfig objects and scrape them as jobs added to the config file's (through --cluster.kubernetes.kubeconfig, or the in-cluster service account).").
		Default("false").BoolVar(&m.enabled)
	app.Flag("kubernetes.monitors.selector", "Label selector the monitor objects must match (default: all).").
		Default("").StringVar(&m.selector)
	app.Flag("kubernetes.monitors.namespaces", "Only watch monitors in these namespaces, repeatable (default: all).").
		StringsVar(&m.namespaces)
	app.Flag("kubernetes.monitors.exclude-namespaces", "Never watch monitors in these namespaces, repeatable.").
		StringsVar(&m.excludeNamespaces)
}

// kubeRESTConfig is the API server configuration: the kubeconfig file when
// given, else the in-cluster service account.
func kubeRESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("--kubernetes.monitors: no --cluster.kubernetes.kubeconfig and not in a cluster: %w", err)
		}
		return rc, nil
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--cluster.kubernetes.kubeconfig %s: %w", kubeconfig, err)
	}
	return rc, nil
}

// newMonitorWatcher builds the watcher the flags ask for; nil without
// --kubernetes.monitors.
func (a *agent) newMonitorWatcher() (*monitors.Watcher, error) {
	m := a.f.monitors
	if !m.enabled {
		return nil, nil
	}
	rc, err := kubeRESTConfig(a.f.kubeconfig)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("--kubernetes.monitors: %w", err)
	}
	core, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("--kubernetes.monitors: %w", err)
	}
	return monitors.NewWatcher(dyn, core, monitors.WatchOptions{
		Selector:          m.selector,
		Namespaces:        m.namespaces,
		ExcludeNamespaces: m.excludeNamespaces,
	}, a.logger.With("component", "monitors"), a.reg)
}

// runMonitors applies every new conversion through the reload path, so
// the merged config goes through the same checks, filter, scrape manager
// and config hash as a SIGHUP.
func (a *agent) runMonitors(ctx context.Context, w *monitors.Watcher) {
	w.Run(ctx, func(r *monitors.Result) {
		a.monitorJobs.Store(r)
		for _, e := range r.Errors {
			a.logger.Warn("Monitor object rejected", "object", e.Source.String(), "err", e.Error())
		}
		_ = a.reloadFor(fmt.Sprintf("monitors changed (%d jobs, %d objects rejected)", len(r.Jobs), len(r.Errors)))
	})
}

// absKubeconfig is --cluster.kubernetes.kubeconfig as an absolute path
// ("" when unset): generated scrape configs discover through it.
func (a *agent) absKubeconfig() string {
	if a.f.kubeconfig == "" {
		return ""
	}
	p, err := filepath.Abs(a.f.kubeconfig)
	if err != nil {
		return a.f.kubeconfig
	}
	return p
}

// monitorsStatus tells the web package which object produced each
// generated job, and which objects were rejected and why.
func (a *agent) monitorsStatus() web.MonitorJobs {
	r := a.monitorJobs.Load()
	if r == nil {
		return web.MonitorJobs{}
	}
	mj := web.MonitorJobs{Sources: make(map[string]string, len(r.Jobs))}
	for _, j := range r.Jobs {
		mj.Sources[j.Config.JobName] = j.Source.String()
	}
	for _, e := range r.Errors {
		why := e.Err.Error()
		if e.Field != "" {
			why = e.Field + ": " + why
		}
		mj.Rejected = append(mj.Rejected, web.RejectedObject{Object: e.Source.String(), Error: why})
	}
	return mj
}
