package monitors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery/kubernetes"
	"go.yaml.in/yaml/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	k8sclient "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/shoal-dev/shoal/internal/promreg"
	"github.com/shoal-dev/shoal/internal/sdbuild"
)

// WatchOptions configure a Watcher. The zero value is the default.
type WatchOptions struct {
	// Selector is a label selector the objects must match ("" selects all).
	Selector string
	// Namespaces, when not empty, are the only namespaces watched.
	Namespaces []string
	// ExcludeNamespaces are never watched, even when listed in Namespaces.
	ExcludeNamespaces []string
	// Debounce is how long the watcher waits after an event before it
	// converts, so that a burst of events gives one conversion. Zero means
	// the default, one second.
	Debounce time.Duration
	// Resync is how often the objects are converted again without any
	// event, which re-reads the Secrets and ConfigMaps they reference: RBAC
	// gives `get` on those, not `watch`, so this is how a changed password
	// or certificate is picked up. Zero means the default, one minute.
	Resync time.Duration
	// Convert are the options of every conversion.
	Convert Options
}

// DefaultDebounce is the Debounce a zero WatchOptions has.
const DefaultDebounce = time.Second

// DefaultResync is the Resync a zero WatchOptions has: about as soon as
// the kubelet refreshes a mounted Secret.
const DefaultResync = time.Minute

// gvrs are the resources watched, by kind.
var gvrs = map[string]schema.GroupVersionResource{
	KindServiceMonitor: monitoringv1.SchemeGroupVersion.WithResource(monitoringv1.ServiceMonitorName),
	KindPodMonitor:     monitoringv1.SchemeGroupVersion.WithResource(monitoringv1.PodMonitorName),
	KindProbe:          monitoringv1.SchemeGroupVersion.WithResource(monitoringv1.ProbeName),
	KindScrapeConfig:   monitoringv1alpha1.SchemeGroupVersion.WithResource(monitoringv1alpha1.ScrapeConfigName),
}

// Kinds lists the four kinds in a fixed order.
var Kinds = []string{KindServiceMonitor, KindPodMonitor, KindProbe, KindScrapeConfig}

// Watcher keeps the monitor objects of a cluster in informer caches and
// converts them again whenever they change.
type Watcher struct {
	dyn     dynamic.Interface
	res     Resolver
	opts    WatchOptions
	sel     labels.Selector
	logger  *slog.Logger
	metrics *promreg.Group
	objects *prometheus.GaugeVec
	regens  prometheus.Counter
	listErr *prometheus.CounterVec
	kept    prometheus.Counter

	mu   sync.Mutex
	last *Result
}

// NewWatcher returns a watcher reading monitors through dyn and the Secrets
// and ConfigMaps they reference through core. Its metrics are registered on
// reg and unregistered when Run returns.
func NewWatcher(dyn dynamic.Interface, core k8sclient.Interface, opts WatchOptions, logger *slog.Logger, reg prometheus.Registerer) (*Watcher, error) {
	if opts.Debounce == 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.Resync == 0 {
		opts.Resync = DefaultResync
	}
	sel, err := labels.Parse(opts.Selector)
	if err != nil {
		return nil, fmt.Errorf("monitor label selector %q: %w", opts.Selector, err)
	}
	w := &Watcher{
		dyn: dyn, res: APIResolver{Client: core}, opts: opts, sel: sel, logger: logger,
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shoal_monitors_objects",
			Help: "Monitor objects in the last conversion, by kind and result (converted or rejected).",
		}, []string{"kind", "result"}),
		regens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_monitors_regenerations_total",
			Help: "Conversions of the monitor objects into scrape configs.",
		}),
		listErr: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shoal_monitors_watch_errors_total",
			Help: "Failed lists or watches of a monitor kind (for example its CRD is not installed, or RBAC refuses it); retried with back-off.",
		}, []string{"kind"}),
		kept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shoal_monitors_resync_kept_total",
			Help: "Periodic re-reads of the Secrets and ConfigMaps that monitors reference that would have rejected an object converted before (a reference gone or unreadable); the jobs in force were kept.",
		}),
	}
	for _, k := range Kinds {
		w.listErr.WithLabelValues(k)
		w.objects.WithLabelValues(k, "converted")
		w.objects.WithLabelValues(k, "rejected")
	}
	if w.metrics, err = promreg.Register(reg, w.objects, w.regens, w.listErr, w.kept); err != nil {
		return nil, fmt.Errorf("registering monitor metrics: %w", err)
	}
	return w, nil
}

// Last returns the result of the last conversion, nil before the first.
func (w *Watcher) Last() *Result {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// Run watches until ctx ends, and calls apply with every new conversion
// result, from one goroutine. The first result comes once every kind has
// been listed, or has failed to list (a CRD that is not installed counts as
// no objects, and is retried), so a starting agent does not drop jobs it
// is about to learn of. Every Resync the objects are converted again to
// pick up changed Secrets and ConfigMaps; such a re-read applies new values
// but never rejects an object that converted before (a Secret deleted or an
// API error): that waits for a change of the objects.
func (w *Watcher) Run(ctx context.Context, apply func(*Result)) {
	defer w.metrics.Unregister()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	ns := ""
	if len(w.opts.Namespaces) == 1 {
		ns = w.opts.Namespaces[0]
	}
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(w.dyn, 0, ns, func(o *metav1.ListOptions) {
		o.LabelSelector = w.opts.Selector
	})
	dirty := make(chan struct{}, 1)
	mark := func() {
		select {
		case dirty <- struct{}{}:
		default:
		}
	}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { mark() },
		UpdateFunc: func(any, any) { mark() },
		DeleteFunc: func(any) { mark() },
	}
	informers := map[string]cache.SharedIndexInformer{}
	var listedMu sync.Mutex
	listed := map[string]bool{} // listed, or failed to list at least once
	for _, k := range Kinds {
		inf := f.ForResource(gvrs[k]).Informer()
		if _, err := inf.AddEventHandler(h); err != nil {
			w.logger.Error("Cannot watch monitors", "kind", k, "err", err)
			continue
		}
		_ = inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
			w.listErr.WithLabelValues(k).Inc()
			w.logger.Warn("Listing or watching monitors failed; retrying (is the CRD installed, may shoal read it?)", "kind", k, "err", err)
			listedMu.Lock()
			listed[k] = true
			listedMu.Unlock()
			mark()
		})
		informers[k] = inf
	}
	f.Start(ctx.Done())
	defer f.Shutdown()

	ready := func() bool {
		listedMu.Lock()
		defer listedMu.Unlock()
		for k, inf := range informers {
			if !listed[k] && !inf.HasSynced() {
				return false
			}
		}
		return true
	}
	started := false
	var lastYAML []byte
	timer := time.NewTimer(w.opts.Debounce)
	defer timer.Stop()
	resync := time.NewTicker(w.opts.Resync)
	defer resync.Stop()
	// pending: a conversion is scheduled; evented: an object changed since
	// the last conversion (else the scheduled one is a resync).
	pending, evented := true, true
	for {
		select {
		case <-ctx.Done():
			return
		case <-dirty:
			evented = true
			if !pending {
				pending = true
				timer.Reset(w.opts.Debounce)
			}
			continue
		case <-resync.C:
			if !pending && started {
				pending = true
				timer.Reset(0)
			}
			continue
		case <-timer.C:
		}
		if !ready() {
			timer.Reset(w.opts.Debounce)
			continue
		}
		wasResync := !evented
		pending, evented = false, false
		r := w.convert(ctx, informers)
		if wasResync {
			if lost := newlyRejected(r, w.Last()); len(lost) > 0 {
				// A Secret that vanished or an API error must not drop jobs
				// that scrape now; only a change of the objects can.
				w.kept.Inc()
				for _, e := range lost {
					w.logger.Warn("Re-reading a monitor's references failed; keeping its jobs until the object changes or a re-read succeeds", "object", e.Source.String(), "err", e.Error())
				}
				continue
			}
		}
		w.setObjects(r)
		y := r.YAML()
		if started && slices.Equal(y, lastYAML) && sameErrors(r, w.Last()) {
			continue
		}
		started = true
		lastYAML = y
		w.mu.Lock()
		w.last = r
		w.mu.Unlock()
		apply(r)
	}
}

// newlyRejected returns the errors of r for objects that last converted.
func newlyRejected(r, last *Result) []*Error {
	if last == nil {
		return nil
	}
	var out []*Error
	for _, e := range r.Errors {
		if !slices.ContainsFunc(last.Errors, func(l *Error) bool { return l.Source == e.Source }) {
			out = append(out, e)
		}
	}
	return out
}

func sameErrors(a, b *Result) bool {
	if b == nil || len(a.Errors) != len(b.Errors) {
		return false
	}
	for i := range a.Errors {
		if a.Errors[i].Error() != b.Errors[i].Error() {
			return false
		}
	}
	return true
}

// allowed says whether an object is in a watched namespace and matches the
// selector (the server filters by label already; this covers the
// namespaces, which the API cannot filter by list).
func (w *Watcher) allowed(o metav1.Object) bool {
	if slices.Contains(w.opts.ExcludeNamespaces, o.GetNamespace()) {
		return false
	}
	if len(w.opts.Namespaces) > 0 && !slices.Contains(w.opts.Namespaces, o.GetNamespace()) {
		return false
	}
	return w.sel.Matches(labels.Set(o.GetLabels()))
}

func (w *Watcher) convert(ctx context.Context, informers map[string]cache.SharedIndexInformer) *Result {
	var objs Objects
	var bad []*Error
	for _, k := range Kinds {
		inf := informers[k]
		if inf == nil {
			continue
		}
		for _, it := range inf.GetStore().List() {
			u, ok := it.(*unstructured.Unstructured)
			if !ok || !w.allowed(u) {
				continue
			}
			if err := addObject(&objs, k, u); err != nil {
				bad = append(bad, &Error{Source: Source{k, u.GetNamespace(), u.GetName()}, Err: err})
			}
		}
	}
	r := Convert(ctx, objs, w.res, w.opts.Convert)
	if len(bad) > 0 {
		r.Errors = append(r.Errors, bad...)
		slices.SortFunc(r.Errors, func(a, b *Error) int { return compareSource(a.Source, b.Source) })
	}
	w.regens.Inc()
	return r
}

// setObjects sets shoal_monitors_objects from the result in force.
func (w *Watcher) setObjects(r *Result) {
	rejected := map[string]int{}
	for _, e := range r.Errors {
		rejected[e.Source.Kind]++
	}
	for _, k := range Kinds {
		w.objects.WithLabelValues(k, "converted").Set(float64(r.Objects[k]))
		w.objects.WithLabelValues(k, "rejected").Set(float64(rejected[k]))
	}
}

// addObject decodes an object of the API into its typed form.
func addObject(objs *Objects, kind string, u *unstructured.Unstructured) error {
	var err error
	switch kind {
	case KindServiceMonitor:
		m := &monitoringv1.ServiceMonitor{}
		if err = fromUnstructured(u, m); err == nil {
			objs.ServiceMonitors = append(objs.ServiceMonitors, m)
		}
	case KindPodMonitor:
		m := &monitoringv1.PodMonitor{}
		if err = fromUnstructured(u, m); err == nil {
			objs.PodMonitors = append(objs.PodMonitors, m)
		}
	case KindProbe:
		m := &monitoringv1.Probe{}
		if err = fromUnstructured(u, m); err == nil {
			objs.Probes = append(objs.Probes, m)
		}
	case KindScrapeConfig:
		m := &monitoringv1alpha1.ScrapeConfig{}
		if err = fromUnstructured(u, m); err == nil {
			objs.ScrapeConfigs = append(objs.ScrapeConfigs, m)
		}
	}
	return err
}

func fromUnstructured(u *unstructured.Unstructured, into any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
		return fmt.Errorf("decoding the object: %w", err)
	}
	return nil
}

// APIResolver reads Secrets and ConfigMaps from the API server on each
// call. Monitors reference few of them and conversions are debounced, so
// a cache of every Secret in the cluster would cost more than it saves.
type APIResolver struct {
	Client k8sclient.Interface
}

// SecretKey implements Resolver.
func (a APIResolver) SecretKey(ctx context.Context, namespace string, sel corev1.SecretKeySelector) (string, error) {
	s, err := a.Client.CoreV1().Secrets(namespace).Get(ctx, sel.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("secret %s/%s: %w", namespace, sel.Name, err)
	}
	if v, ok := s.Data[sel.Key]; ok {
		return string(v), nil
	}
	if v, ok := s.StringData[sel.Key]; ok {
		return v, nil
	}
	return "", fmt.Errorf("secret %s/%s has no key %q", namespace, sel.Name, sel.Key)
}

// ConfigMapKey implements Resolver.
func (a APIResolver) ConfigMapKey(ctx context.Context, namespace string, sel corev1.ConfigMapKeySelector) (string, error) {
	c, err := a.Client.CoreV1().ConfigMaps(namespace).Get(ctx, sel.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("configmap %s/%s: %w", namespace, sel.Name, err)
	}
	if v, ok := c.Data[sel.Key]; ok {
		return v, nil
	}
	if v, ok := c.BinaryData[sel.Key]; ok {
		return string(v), nil
	}
	return "", fmt.Errorf("configmap %s/%s has no key %q", namespace, sel.Name, sel.Key)
}

var _ Resolver = APIResolver{}

// ErrJobClash is returned by Merge for a file job with a generated job's name.
var ErrJobClash = errors.New("a scrape config of the file has the name of a job generated from a monitor")

// Merge appends the generated jobs of r to cfg's scrape configs, each
// parsed afresh from its YAML and validated against cfg's global section,
// as if the file listed them. When kubeconfig is not empty, generated
// kubernetes_sd_configs that name no API server read it, so that a shoal
// outside the cluster discovers targets where it found the monitors
// (the operator's Prometheus always runs in the cluster). A file job with the name of a generated job
// is refused: generated names carry the kind as a prefix
// ("serviceMonitor/ns/name/0"), which a hand-written job does not use.
func Merge(cfg *config.Config, r *Result, kubeconfig string) error {
	if r == nil || len(r.Jobs) == 0 {
		return nil
	}
	file, err := cfg.GetScrapeConfigs()
	if err != nil {
		return err
	}
	names := make(map[string]bool, len(file))
	for _, sc := range file {
		names[sc.JobName] = true
	}
	for _, j := range r.Jobs {
		if names[j.Config.JobName] {
			return fmt.Errorf("%w: %q (from %s)", ErrJobClash, j.Config.JobName, j.Source)
		}
		sc := &config.ScrapeConfig{}
		if err := yaml.UnmarshalStrict(j.YAML, sc); err != nil {
			return fmt.Errorf("job %q from %s: %w", j.Config.JobName, j.Source, sdbuild.Explain(err))
		}
		if kubeconfig != "" {
			for _, d := range sc.ServiceDiscoveryConfigs {
				if k, ok := d.(*kubernetes.SDConfig); ok && k.APIServer.URL == nil && k.KubeConfig == "" {
					k.KubeConfig = kubeconfig
				}
			}
		}
		if err := sc.Validate(cfg.GlobalConfig); err != nil {
			return fmt.Errorf("job %q from %s: %w", j.Config.JobName, j.Source, err)
		}
		cfg.ScrapeConfigs = append(cfg.ScrapeConfigs, sc)
	}
	return nil
}
