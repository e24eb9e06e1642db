// Package promreg registers a package's collectors as one group: all of them
// or, on the first error, none (those already registered are unregistered
// again), and unregisters the group on close. It is the project's metrics
// rule (register in the constructor, fail on an error, unregister on close)
// written once.
package promreg

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Group is a set of collectors registered together. The zero value (and a
// nil *Group) is an empty group: Unregister does nothing.
type Group struct {
	reg        prometheus.Registerer
	registered []prometheus.Collector
}

// Register registers cs with reg in order. A nil reg registers nothing. On
// an error, the collectors registered so far are unregistered and the error
// is returned.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) (*Group, error) {
	g := &Group{reg: reg}
	if err := g.Add(cs...); err != nil {
		return nil, err
	}
	return g, nil
}

// Add registers more collectors into the group, with the same all-or-none
// rule for this call: on an error the whole group is unregistered.
func (g *Group) Add(cs ...prometheus.Collector) error {
	if g.reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := g.reg.Register(c); err != nil {
			g.Unregister()
			return err
		}
		g.registered = append(g.registered, c)
	}
	return nil
}

// Unregister removes every collector of the group from its registry.
func (g *Group) Unregister() {
	if g == nil || g.reg == nil {
		return
	}
	for _, c := range g.registered {
		g.reg.Unregister(c)
	}
	g.registered = nil
}

// Registerer returns a Registerer whose registrations join the group, for a
// library that registers its own metrics (Prometheus' wlog): Unregister
// then takes those back too. It is a nil interface, as libraries expect for
// "no metrics", when the group has no registry.
func (g *Group) Registerer() prometheus.Registerer {
	if g == nil || g.reg == nil {
		return nil
	}
	return groupRegisterer{g}
}

type groupRegisterer struct{ g *Group }

func (r groupRegisterer) Register(c prometheus.Collector) error { return r.g.Add(c) }

func (r groupRegisterer) MustRegister(cs ...prometheus.Collector) {
	if err := r.g.Add(cs...); err != nil {
		panic(err)
	}
}

func (r groupRegisterer) Unregister(c prometheus.Collector) bool {
	r.g.registered = slices.DeleteFunc(r.g.registered, func(x prometheus.Collector) bool { return x == c })
	return r.g.reg.Unregister(c)
}
