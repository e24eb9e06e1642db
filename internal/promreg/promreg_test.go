package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func counter(name string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: name})
}

func families(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return len(mfs)
}

// A failed group leaves nothing of itself behind and the group already
// there untouched; an unregistered group frees its names for a new one.
func TestRegisterAllOrNone(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, err := Register(reg, counter("a"), counter("b"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Register(reg, counter("c"), counter("b")); err == nil {
		t.Fatal("a duplicate name was registered")
	}
	if got := families(t, reg); got != 2 {
		t.Fatalf("%d metric families after the refused group, want 2 (c must be gone)", got)
	}
	if err := first.Add(counter("d"), counter("a")); err == nil {
		t.Fatal("Add registered a duplicate name")
	}
	if got := families(t, reg); got != 0 {
		t.Fatalf("%d metric families after a failed Add, want 0: the whole group goes", got)
	}
	again, err := Register(reg, counter("a"), counter("b"))
	if err != nil {
		t.Fatal(err)
	}
	again.Unregister()
	if got := families(t, reg); got != 0 {
		t.Fatalf("%d metric families after Unregister, want 0", got)
	}
	var none *Group
	none.Unregister()
	if g, err := Register(nil, counter("a")); err != nil || g == nil {
		t.Fatalf("Register(nil) = %v, %v; want an empty group", g, err)
	}
}
