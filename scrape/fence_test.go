package scrape

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	promscrape "github.com/prometheus/prometheus/scrape"
	"github.com/prometheus/prometheus/storage"

	"github.com/shoal-dev/shoal/wal"
)

// appenderFor opens an appender as a scrape loop of a target of unit u does.
func appenderFor(f *Fence, u Unit) storage.AppenderV2 {
	t := promscrape.NewTarget(labels.FromStrings("__address__", "a:1", "job", "j", UnitLabel, u.String()), &config.ScrapeConfig{JobName: "j"}, nil, nil)
	return f.AppenderV2(promscrape.ContextWithTarget(context.Background(), t))
}

func appendOne(t *testing.T, app storage.AppenderV2, name string) {
	t.Helper()
	if _, err := app.Append(0, labels.FromStrings("__name__", name), 0, time.Now().UnixMilli(), 1, nil, nil, storage.AOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestFenceWaitsForInFlightAndRefusesLaterAppenders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, err := wal.Open(t.TempDir(), wal.DefaultOptions(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		reg := prometheus.NewRegistry()
		f, err := NewFence(w, reg)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		u, other := Unit{Key: 42}, Unit{Key: 43}

		before := appenderFor(f, u)
		appendOne(t, before, "before_fence")
		unrelated := appenderFor(f, other)

		fenced := make(chan error, 1)
		go func() { fenced <- f.Fence(context.Background(), []Unit{u}) }()
		synctest.Wait()
		select {
		case err := <-fenced:
			t.Fatalf("Fence returned (%v) while an appender of the unit was still open", err)
		default:
		}

		// Opened after the fence: takes samples, writes none.
		after := appenderFor(f, u)
		appendOne(t, after, "after_fence")
		if err := after.Commit(); err != nil {
			t.Fatal(err)
		}

		// Another unit's appender does not hold the fence up.
		if err := before.Commit(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case err := <-fenced:
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatal("Fence did not return after the in-flight appender committed")
		}
		appendOne(t, unrelated, "unrelated")
		if err := unrelated.Commit(); err != nil {
			t.Fatal(err)
		}

		if got := w.ActiveSeries(); got != 2 {
			t.Fatalf("WAL has %d series, want 2 (before_fence, unrelated; nothing after the fence)", got)
		}
		if got := testutil.ToFloat64(f.refused); got != 1 {
			t.Fatalf("shoal_handoff_fenced_appends_total = %v, want 1", got)
		}

		// Gained back: appends again.
		f.Unfence([]Unit{u})
		again := appenderFor(f, u)
		appendOne(t, again, "after_unfence")
		if err := again.Commit(); err != nil {
			t.Fatal(err)
		}
		if got := w.ActiveSeries(); got != 3 {
			t.Fatalf("WAL has %d series after un-fencing, want 3", got)
		}
	})
}

func TestFenceHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, err := NewFence(storage.AppendableV2(nopAppendable{}), nil)
		if err != nil {
			t.Fatal(err)
		}
		u := Unit{Key: 1, Rank: 1}
		_ = appenderFor(f, u) // never finishes
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := f.Fence(ctx, []Unit{u}); err == nil {
			t.Fatal("Fence returned nil with an appender still open and ctx done")
		}
		if !f.Fenced(u) {
			t.Fatal("unit not fenced after a cancelled Fence")
		}
	})
}

func TestUnitRoundTrip(t *testing.T) {
	u := Unit{Key: 0xdeadbeef01, Rank: 2}
	got, err := ParseUnit(u.String())
	if err != nil || got != u {
		t.Fatalf("ParseUnit(%q) = %v, %v", u.String(), got, err)
	}
	for _, bad := range []string{"", "x/1", "12", "12/-1", "12/a"} {
		if _, err := ParseUnit(bad); err == nil {
			t.Errorf("ParseUnit(%q) accepted", bad)
		}
	}
}

type nopAppendable struct{}

func (nopAppendable) AppenderV2(context.Context) storage.AppenderV2 {
	return &fencedAppender{refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})}
}

type recordingMeter struct {
	units    []Unit
	samples  []int
	interval []time.Duration
}

func (m *recordingMeter) Measured(u Unit, samples int, interval time.Duration) {
	m.units = append(m.units, u)
	m.samples = append(m.samples, samples)
	m.interval = append(m.interval, interval)
}

// The meter hears what each committed scrape appended, at the target's
// interval; a rolled-back scrape and a fenced unit's appends are not load.
func TestFenceMeterCountsCommittedSamples(t *testing.T) {
	w, err := wal.Open(t.TempDir(), wal.DefaultOptions(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	f, err := NewFence(w, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := &recordingMeter{}
	f.SetMeter(m)
	u := Unit{Key: 7}
	tg := promscrape.NewTarget(labels.FromStrings("__address__", "a:1", "job", "j", UnitLabel, u.String(), "__scrape_interval__", "15s"), &config.ScrapeConfig{JobName: "j"}, nil, nil)
	ctx := promscrape.ContextWithTarget(context.Background(), tg)

	app := f.AppenderV2(ctx)
	for _, name := range []string{"a", "b", "c"} {
		appendOne(t, app, name)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	app = f.AppenderV2(ctx)
	appendOne(t, app, "d")
	if err := app.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := f.Fence(context.Background(), []Unit{u}); err != nil {
		t.Fatal(err)
	}
	app = f.AppenderV2(ctx)
	appendOne(t, app, "e")
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if len(m.units) != 1 || m.units[0] != u || m.samples[0] != 3 || m.interval[0] != 15*time.Second {
		t.Fatalf("meter heard units %v samples %v intervals %v, want one commit of 3 samples at 15s", m.units, m.samples, m.interval)
	}
}

// A failed scrape (its up sample 0) appends only report series: it is not
// the target's load, so the meter does not hear it; the next good scrape
// is heard again.
func TestFenceMeterSkipsFailedScrapes(t *testing.T) {
	w, err := wal.Open(t.TempDir(), wal.DefaultOptions(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	f, err := NewFence(w, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := &recordingMeter{}
	f.SetMeter(m)
	u := Unit{Key: 8}
	tg := promscrape.NewTarget(labels.FromStrings("__address__", "a:1", "job", "j", UnitLabel, u.String(), "__scrape_interval__", "15s"), &config.ScrapeConfig{JobName: "j"}, nil, nil)
	ctx := promscrape.ContextWithTarget(context.Background(), tg)
	ts := time.Now().UnixMilli()
	scrape := func(up float64) {
		ts += 15_000
		app := f.AppenderV2(ctx)
		for _, name := range []string{"a", "up"} {
			v := 1.0
			if name == "up" {
				v = up
			}
			if _, err := app.Append(0, labels.FromStrings("__name__", name), 0, ts, v, nil, nil, storage.AOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	scrape(0)
	scrape(1)
	if len(m.samples) != 1 || m.samples[0] != 2 {
		t.Fatalf("meter heard %v, want one scrape of 2 samples (the failed one unheard)", m.samples)
	}
}
