package main

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestJoinStartLatchesOnceGainedTargetsStarted: not started before the
// targets are placed or while some wait; started once none does, and it stays so when later ring changes
// make targets wait again.
func TestJoinStartLatchesOnceGainedTargetsStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := joinStart{bound: time.Minute}
		if j.started(startState{waiting: 0, placed: false}) {
			t.Fatal("started before any target was placed with this node a participant")
		}
		if j.started(startState{waiting: 3, placed: true}) {
			t.Fatal("started with 3 gained targets waiting")
		}
		time.Sleep(10 * time.Second)
		if j.started(startState{waiting: 1, placed: true}) {
			t.Fatal("started with 1 gained target waiting, 10s in")
		}
		if !j.started(startState{waiting: 0, placed: true}) {
			t.Fatal("not started with no target waiting")
		}
		if !j.started(startState{waiting: 5, placed: true}) {
			t.Error("turned back to not started when a later ring change made targets wait")
		}
	})
}

// TestJoinStartEndsAtTheBound: a ring that keeps some target waiting at
// every ask holds readiness back for the bound, from the first ask, and
// no longer.
func TestJoinStartEndsAtTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := joinStart{bound: time.Minute}
		time.Sleep(time.Hour) // the bound counts from the first ask, not from creation
		if j.started(startState{waiting: 2, placed: true}) {
			t.Fatal("started at the first ask")
		}
		time.Sleep(time.Minute - time.Second)
		if j.started(startState{waiting: 2, placed: true}) {
			t.Fatal("started before the bound")
		}
		time.Sleep(time.Second)
		if !j.started(startState{waiting: 2, placed: true}) {
			t.Fatal("not started at the bound")
		}
	})
}

// TestJoinStartStartedWhileSteppingAside: a node that stepped aside for a
// scrape configuration its peers do not share owns nothing and is
// started, though it was never placed as a participant; without that a
// rolling update carrying the change would wait for it until the bound.
func TestJoinStartStartedWhileSteppingAside(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := joinStart{bound: time.Minute}
		if !j.started(startState{steppedAside: true}) {
			t.Fatal("not started while stepping aside")
		}
	})
}
