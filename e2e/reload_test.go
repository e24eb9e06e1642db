package e2e

import (
	"fmt"
	"os"
	"syscall"
	"testing"
)

// TestSIGHUPReload changes the configuration under a running agent: SIGHUP
// applies a good file (the new target set is scraped), refuses a broken one
// (the running set stays, the process lives on), and a SIGHUP that arrives
// while the agent is still starting neither kills it nor is lost.
func TestSIGHUPReload(t *testing.T) {
	needBinary(t)
	targets := startTargets(t, 4, 0)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, configOpts{targets: targetAddrs(targets[:2])})
	a := newAgent(t, agentSpec{name: "reload", config: cfg})

	activeSet := func() (map[string]bool, error) {
		active, err := a.activeTargets()
		if err != nil {
			return nil, err
		}
		set := map[string]bool{}
		for inst := range active {
			set[inst] = true
		}
		return set, nil
	}
	want := func(tgs []*target) func() error {
		return func() error {
			set, err := activeSet()
			if err != nil {
				return err
			}
			if len(set) != len(tgs) {
				return fmt.Errorf("active %v, want %d targets", set, len(tgs))
			}
			for _, tg := range tgs {
				if !set[tg.addr] {
					return fmt.Errorf("active %v lacks %s", set, tg.addr)
				}
			}
			return nil
		}
	}

	// A SIGHUP as soon as the HTTP server answers, before the agent is ready,
	// with a file that already names targets 3 and 4: the agent survives and
	// ends up scraping them.
	a.start()
	a.waitHTTP(startTimeout)
	writeConfig(t, dir, configOpts{targets: targetAddrs(targets[2:])})
	a.signal(syscall.SIGHUP)
	a.waitReady(startTimeout)
	eventually(t, startTimeout, "the file read after the early SIGHUP in force", want(targets[2:]))

	// A broken file is refused; the running targets stay and the agent lives.
	if err := os.WriteFile(cfg, []byte("scrape_configs:\n  - job_name: e2e\n    static_configz: []\n"), 0o644); err != nil {
		fatal(t, err)
	}
	a.signal(syscall.SIGHUP)
	eventually(t, startTimeout, "reload failure reported", func() error {
		v, err := a.metricValue("shoal_config_last_reload_successful", nil)
		if err != nil {
			return err
		}
		if v != 0 {
			return fmt.Errorf("shoal_config_last_reload_successful = %v", v)
		}
		return nil
	})
	if err := a.exitedEarly(); err != nil {
		fatal(t, err)
	}
	if err := want(targets[2:])(); err != nil {
		fatalf(t, "after a refused reload: %v", err)
	}

	// A good file again: all four.
	writeConfig(t, dir, configOpts{targets: targetAddrs(targets)})
	a.signal(syscall.SIGHUP)
	eventually(t, startTimeout, "all four targets after a good reload", want(targets))
	if v, err := a.metricValue("shoal_config_last_reload_successful", nil); err != nil || v != 1 {
		errorf(t, "shoal_config_last_reload_successful = %v (%v), want 1", v, err)
	}
	a.stop()
}
