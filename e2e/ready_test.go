package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRestartedReplicaIsReadyOnceItsTargetsStart: a replica that rejoins
// is not ready while its gained targets wait for a peer's hand-off, so
// that a rolling update restarts the next replica only once this one
// scrapes what it owns. node-1 is frozen (SIGSTOP) while node-3 restarts:
// it still announces the ring without node-3, a placement node-3's new
// life never built, so node-3 holds every target it gains until node-1
// answers again or is declared dead.
func TestRestartedReplicaIsReadyOnceItsTargetsStart(t *testing.T) {
	needBinary(t)
	targets := startTargets(t, 30, 0)
	recv := startReceiver(t)
	cfg := writeConfig(t, t.TempDir(), configOpts{targets: targetAddrs(targets), remoteWriteURL: recv.writeURL()})
	nodes := newClusterAgents(t, 3, cfg, 0)
	startCluster(t, nodes)
	waitConverged(t, nodes, targets)

	nodes[2].stop()
	waitConverged(t, nodes[:2], targets)
	// node-3 forgets the members it remembered: it would try to rejoin
	// node-1 and wait for the frozen node's state exchange to time out.
	if err := os.Remove(filepath.Join(nodes[2].storage, "cluster-members.json")); err != nil {
		fatal(t, err)
	}
	nodes[0].signal(syscall.SIGSTOP)
	resumed := false
	resume := func() {
		if !resumed {
			nodes[0].signal(syscall.SIGCONT)
			resumed = true
		}
	}
	defer resume()
	// Joining through node-2 only, for the same reason.
	nodes[2].join = []string{nodes[1].gossipAddr}
	nodes[2].start()
	nodes[2].waitHTTP(startTimeout)
	eventually(t, startTimeout, "node-3 a participant that is not ready for its gained targets", func() error {
		code, why, err := readyStatus(nodes[2])
		if err != nil {
			return err
		}
		if code == http.StatusOK {
			fatalf(t, "node-3 ready while node-1, frozen, may still scrape the targets node-3 gained")
		}
		if !strings.Contains(why, "gained targets") {
			return fmt.Errorf("/-/ready %d: %s", code, why)
		}
		return nil
	})
	resume()
	nodes[2].waitReady(convergeTimeout)
	// No check of the receiver's refusals: node-1, frozen long enough to
	// be declared dead, sends what it scraped before the freeze after its
	// peers took its targets over, as a killed replica's next life does.
	waitConverged(t, nodes, targets)
}

// readyStatus is a's /-/ready status code and body.
func readyStatus(a *agent) (int, string, error) {
	resp, err := httpClient.Get(a.url("/-/ready"))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(bytes.TrimSpace(body)), err
}
