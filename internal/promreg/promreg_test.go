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

// What a library registers through the group's Registerer is the group's:
// a duplicate fails without leaving the library's other metrics behind,
// and Unregister takes back what the library registered.
func TestRegistererJoinsTheGroup(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := Register(reg, counter("taken")); err != nil {
		t.Fatal(err)
	}
	g, err := Register(reg)
	if err != nil {
		t.Fatal(err)
	}
	lib := g.Registerer()
	lib.MustRegister(counter("lib_a"), counter("lib_b"))
	if got := families(t, reg); got != 3 {
		t.Fatalf("%d metric families, want 3", got)
	}
	if !lib.Unregister(counter("lib_b")) || families(t, reg) != 2 {
		t.Fatal("the library's own Unregister did not remove lib_b")
	}
	if err := lib.Register(counter("taken")); err == nil {
		t.Fatal("the library registered a duplicate name")
	}
	if got := families(t, reg); got != 1 {
		t.Fatalf("%d metric families after the library's failed registration, want 1 (only the other group's)", got)
	}
	lib.MustRegister(counter("lib_a"))
	g.Unregister()
	if got := families(t, reg); got != 1 {
		t.Fatalf("%d metric families after Unregister, want 1", got)
	}
	var none *Group
	if none.Registerer() != nil {
		t.Fatal("a nil group's Registerer is not a nil interface")
	}
	if g, _ := Register(nil); g.Registerer() != nil {
		t.Fatal("a group without registry has a Registerer")
	}
}
