package discoveryerr

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// TestClientGoHandlerRecordsInformerRefusal runs a real client-go informer,
// logging through klog into ClientGoHandler, against a lister that the "API
// server" refuses and then serves: a forbidden list (the RBAC case), and a
// throttled streaming list (client-go retries it inside, like an unreachable
// server).
func TestClientGoHandlerRecordsInformerRefusal(t *testing.T) {
	for _, tc := range []struct {
		name string
		// list and watchList answer while refusing.
		list, watchList error
		want            string
	}{
		{
			name:      "forbidden list",
			list:      apierrors.NewForbidden(corev1.Resource("pods"), "", errFake),
			watchList: apierrors.NewBadRequest("no streaming lists here"),
			want:      "Failed to watch: failed to list *v1.Pod: pods is forbidden",
		},
		{
			name:      "throttled streaming list",
			watchList: apierrors.NewTooManyRequests("slow down", 1),
			want:      "watch-list failed - backing off: slow down",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testInformerRefusal(t, tc.list, tc.watchList, tc.want)
		})
	}
}

func testInformerRefusal(t *testing.T, listErr, watchListErr error, want string) {
	var out testutil.LogBuffer
	var rec Recorder
	// Shoal's logger at its default level, info: the success message (V(2))
	// must be seen without reaching the log.
	next := slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})
	klog.SetSlogLogger(slog.New(ClientGoHandler(next, &rec)))
	t.Cleanup(klog.ClearLogger)

	var refuse atomic.Bool
	refuse.Store(true)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			if refuse.Load() && listErr != nil {
				return nil, listErr
			}
			return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
		},
		WatchFuncWithContext: func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if o.SendInitialEvents != nil {
				if refuse.Load() {
					return nil, watchListErr
				}
				// Served, but not as a stream: client-go falls back to a list.
				return nil, apierrors.NewBadRequest("no streaming lists here")
			}
			return watch.NewFake(), nil
		},
	}
	inf := cache.NewSharedInformer(lw, &corev1.Pod{}, 0)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })

	testutil.Eventually(t, 10*time.Second, "the refusal recorded", func() error {
		errs := rec.Errors()
		if len(errs) != 1 {
			return errorf("errors %v; log:\n%s", errs, out.String())
		}
		e := errs[0]
		if e.Kind != Targets || e.Method != "kubernetes_sd *v1.Pod" || !strings.HasPrefix(e.Text, want) {
			return errorf("error %+v, want text %q", e, want)
		}
		return nil
	})

	refuse.Store(false)
	testutil.Eventually(t, 10*time.Second, "the error cleared once the list succeeds", func() error {
		if errs := rec.Errors(); len(errs) != 0 {
			return errorf("errors %v", errs)
		}
		return nil
	})
	if strings.Contains(out.String(), cachesPopulated) {
		t.Errorf("a verbosity-2 message reached an info-level log:\n%s", out.String())
	}
}
