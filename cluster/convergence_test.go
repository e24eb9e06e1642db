package cluster

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// TestConvergence measures how long it takes from the first Start until
// every node sees every other as a participant, for 5 and 50 in-process
// nodes on loopback addresses, with the fast test timings and with
// memberlist's LAN defaults (what shoal runs with). It also measures the CPU
// the whole process uses per second once the cluster is steady. It logs the
// figures and asserts nothing about speed:
//
//	go test -run TestConvergence -v ./cluster/
//
// -short and -race skip the 50-node runs.
func TestConvergence(t *testing.T) {
	timings := map[string]func(*memberlist.Config){
		"test": fastTimings,
		"lan":  func(*memberlist.Config) {},
	}
	for _, size := range []int{5, 50} {
		for _, name := range []string{"test", "lan"} {
			t.Run(fmt.Sprintf("nodes=%d/timings=%s", size, name), func(t *testing.T) {
				if size > 5 && testing.Short() {
					t.Skip("50 nodes in -short mode")
				}
				if size > 5 && raceEnabled {
					t.Skip("50 nodes under the race detector measure the detector, not the cluster")
				}
				measureConvergence(t, size, timings[name])
			})
		}
	}
}

func measureConvergence(t *testing.T, size int, timing func(*memberlist.Config)) {
	tn := newTestNet(t)
	nodes := make([]testNode, size)
	config := func(i int) Config {
		cfg := testConfig(tn, i)
		cfg.Memberlist = timing
		// As in production: a node that a CPU-starved moment cut off from
		// the rest finds its way back.
		cfg.RejoinInterval = 2 * time.Second
		if i > 1 {
			cfg.Join = []string{tn.addr(1)}
		}
		return cfg
	}
	begin := time.Now()
	// Node 1 first, then the rest at once, as a rollout would.
	nodes[0] = startNode(t, config(1))
	nodes[0].SetState(Participant)
	var wg sync.WaitGroup
	for i := 2; i <= size; i++ {
		cfg := config(i)
		n, err := New(cfg, testLogger(t, cfg.NodeName), nil)
		if err != nil {
			t.Fatal(err)
		}
		nodes[i-1] = testNode{Node: n}
		t.Cleanup(func() { n.Shutdown() })
		wg.Go(func() {
			if err := n.Start(t.Context()); err != nil {
				t.Error(err)
				return
			}
			n.SetState(Participant)
		})
	}
	wg.Wait()
	started := time.Since(begin)
	testutil.Eventually(t, 120*time.Second, "converged", converged(nodes, expectView(allStates(nodes, Participant))))
	took := time.Since(begin)

	// Steady-state CPU of the whole test process (all nodes together).
	const window = time.Second
	cpu0, wall0 := cpuTime(), time.Now()
	time.Sleep(window) // measuring over a fixed window, not synchronising
	cores := (cpuTime() - cpu0).Seconds() / time.Since(wall0).Seconds()
	t.Logf("%d nodes: converged in %s (all started after %s); steady CPU %.2f cores",
		size, took.Round(time.Millisecond), started.Round(time.Millisecond), cores)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
