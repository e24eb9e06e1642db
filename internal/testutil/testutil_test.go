package testutil

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestPollReturnsLastError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		err := Poll(time.Second, func() error { calls++; return errors.New("not yet") })
		if err == nil || err.Error() != "not yet" {
			t.Fatalf("Poll = %v, want the condition's last error", err)
		}
		if calls < 2 {
			t.Fatalf("condition checked %d times, want it re-checked until the deadline", calls)
		}
		n := 0
		if err := Poll(time.Second, func() error {
			if n++; n < 3 {
				return errors.New("not yet")
			}
			return nil
		}); err != nil {
			t.Fatalf("Poll = %v after the condition became true", err)
		}
	})
}

func TestPollEveryKeepsItsInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var at []time.Time
		start := time.Now()
		_ = PollEvery(100*time.Millisecond, time.Second, func() error { at = append(at, time.Now()); return errors.New("not yet") })
		if len(at) != 12 || !at[0].Equal(start) || at[1].Sub(at[0]) != 100*time.Millisecond {
			t.Fatalf("checked at %v after the start, want every 100ms until past 1s", at)
		}
	})
}

func TestValue(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"reason", "node"})
	reg.MustRegister(c)
	c.WithLabelValues("a", "n1").Add(2)
	c.WithLabelValues("a", "n2").Add(3)
	c.WithLabelValues("b", "n1").Add(5)

	for _, tc := range []struct {
		want map[string]string
		v    float64
	}{
		{nil, 10},
		{map[string]string{"reason": "a"}, 5},
		{map[string]string{"reason": "b", "node": "n1"}, 5},
	} {
		got, err := GatherValue(reg, "x_total", tc.want)
		if err != nil || got != tc.v {
			t.Errorf("GatherValue(%v) = %v, %v; want %v", tc.want, got, err, tc.v)
		}
	}
	if _, err := GatherValue(reg, "x_total", map[string]string{"reason": "c"}); err == nil {
		t.Error("no error for labels no series has")
	}
	if _, err := GatherValue(reg, "y_total", nil); err == nil {
		t.Error("no error for a family that is not registered")
	}
	mfs, err := ParseText(strings.NewReader("# TYPE z gauge\nz{a=\"1\"} 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := Value(mfs, "z", map[string]string{"a": "1"}); err != nil || v != 4 {
		t.Errorf("Value from text = %v, %v", v, err)
	}
}
