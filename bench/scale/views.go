package scale

import (
	"context"
	"os/exec"
	"time"
)

// viewRounds is how many times each view is asked; the first answer is
// reported apart, the median and worst of all.
const viewRounds = 5

// viewPause separates the rounds by more than web's PeerAnswerTTL (1s), so
// that every round asks every peer again: the figures are a fresh view's,
// not a cached one's.
const viewPause = 1100 * time.Millisecond

// views times the cluster-wide views on one replica at full size: each
// one asks every peer.
func (r *run) views(ctx context.Context) {
	reps := r.c.runningReplicas()
	if len(reps) == 0 {
		return
	}
	rep := reps[0]
	for _, path := range []string{"/cluster", "/api/v1/cluster/peers", "/api/v1/cluster/targets"} {
		v := View{Name: "GET " + path}
		r.timeView(&v, func() (int, error) {
			cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			b, err := r.c.get(cctx, rep, path)
			return len(b), err
		})
		r.res.Views = append(r.res.Views, v)
	}
	v := View{Name: "shoal cluster targets"}
	r.timeView(&v, func() (int, error) {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(cctx, r.o.Shoal, "cluster", "--url=http://"+rep.web, "targets").Output()
		return len(out), err
	})
	r.res.Views = append(r.res.Views, v)
	for _, v := range r.res.Views {
		r.logf("view %s: first %v, median %v, max %v, %d bytes%s", v.Name, v.First, v.Median, v.Max, v.Bytes, errSuffix(v.Err))
	}
}

func (r *run) timeView(v *View, ask func() (int, error)) {
	var ds []time.Duration
	for i := range viewRounds {
		if i > 0 {
			time.Sleep(viewPause) // a measurement's spacing, not a synchronisation
		}
		t0 := time.Now()
		n, err := ask()
		d := time.Since(t0)
		if err != nil {
			v.Err = err.Error()
			return
		}
		if i == 0 {
			v.First = d
		}
		v.Bytes = n
		ds = append(ds, d)
	}
	ds = sortedDurations(ds)
	v.Median, v.Max = ds[len(ds)/2], ds[len(ds)-1]
}
