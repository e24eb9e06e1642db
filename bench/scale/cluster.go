package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/shoal-dev/shoal/bench/harness"
	"github.com/shoal-dev/shoal/internal/promtext"
)

// replica is one shoal process slot: a fixed loopback address, name and
// storage directory, as a StatefulSet pod keeps them across restarts.
type replica struct {
	name    string
	ip      string
	dir     string
	web     string // ip:port
	gossip  string // ip:port
	cmd     *exec.Cmd
	done    chan struct{}
	failed  float64 // samples_failed_total of previous lives
	started time.Time
}

// running reports whether the replica's process is alive.
func (r *replica) running() bool {
	if r.cmd == nil {
		return false
	}
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// cluster starts, stops and asks the shoal processes of one run.
type cluster struct {
	bin        string
	config     string
	args       []string // further flags of every replica
	waitFor    int
	gossipPort int
	webPort    int
	base       string // the first three octets, "127.0.50"
	first      int    // last octet of replica 0
	dir        string
	replicas   []*replica
	mu         sync.Mutex
	client     *http.Client
}

// addrFor is replica i's loopback address.
func (c *cluster) addrFor(i int) string { return fmt.Sprintf("%s.%d", c.base, c.first+i) }

// slot returns replica i, creating its slot (not its process) if needed.
func (c *cluster) slot(i int) *replica {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.replicas) <= i {
		j := len(c.replicas)
		ip := c.addrFor(j)
		name := fmt.Sprintf("shoal-%d", j)
		c.replicas = append(c.replicas, &replica{
			name: name, ip: ip, dir: filepath.Join(c.dir, name),
			web:    net.JoinHostPort(ip, strconv.Itoa(c.webPort)),
			gossip: net.JoinHostPort(ip, strconv.Itoa(c.gossipPort)),
		})
	}
	return c.replicas[i]
}

// joinList is every slot's gossip address up to n, as a headless
// Service's DNS name would resolve for a StatefulSet.
func (c *cluster) joinList(n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = net.JoinHostPort(c.addrFor(i), strconv.Itoa(c.gossipPort))
	}
	return out
}

// start launches replica i's process; it does not wait for readiness.
func (c *cluster) start(i, joinSize int) error {
	r := c.slot(i)
	if r.running() {
		return fmt.Errorf("%s already running", r.name)
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return err
	}
	args := []string{
		"--config.file=" + c.config,
		"--web.listen-address=" + r.web,
		"--storage.path=" + filepath.Join(r.dir, "data"),
		"--cluster.enabled",
		"--cluster.node-name=" + r.name,
		"--cluster.listen-address=" + r.gossip,
		"--cluster.advertise-address=" + r.gossip,
		"--cluster.wait-for-size=" + strconv.Itoa(c.waitFor),
		"--cluster.wait-timeout=3m",
	}
	args = append(args, c.args...)
	for _, j := range c.joinList(joinSize) {
		if j != r.gossip {
			args = append(args, "--cluster.join="+j)
		}
	}
	lf, err := os.OpenFile(filepath.Join(r.dir, "shoal.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("starting %s: %w", r.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		lf.Close()
		close(done)
	}()
	r.cmd, r.done, r.started = cmd, done, time.Now()
	return nil
}

// get fetches path from replica r's web port.
func (c *cluster) get(ctx context.Context, r *replica, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.web+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("%s %s: %s", r.name, path, resp.Status)
	}
	return b, nil
}

// waitReady polls /-/ready until it answers 200 and returns when it did.
func (c *cluster) waitReady(ctx context.Context, r *replica, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := c.get(rctx, r, "/-/ready")
		cancel()
		if err == nil {
			return time.Now(), nil
		}
		if !r.running() {
			return time.Time{}, fmt.Errorf("%s exited before it was ready; see %s", r.name, filepath.Join(r.dir, "shoal.log"))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return time.Time{}, fmt.Errorf("%s not ready after %v: %v", r.name, timeout, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// metric reads one value from replica r's /metrics.
func (c *cluster) metric(ctx context.Context, r *replica, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := c.get(ctx, r, "/metrics")
	if err != nil {
		return 0, err
	}
	mfs, err := promtext.Parse(bytesReader(b))
	if err != nil {
		return 0, err
	}
	return promtext.Value(mfs, name, nil)
}

const failedMetric = "prometheus_remote_storage_samples_failed_total"

// stop sends sig and waits for the process to exit (SIGKILL after grace).
// Before a SIGTERM it banks the replica's failed-samples counter, which
// the next life starts again from zero.
func (c *cluster) stop(ctx context.Context, r *replica, sig syscall.Signal, grace time.Duration) error {
	if !r.running() {
		return nil
	}
	if sig == syscall.SIGTERM {
		if v, err := c.metric(ctx, r, failedMetric); err == nil {
			r.failed += v
		}
	}
	_ = r.cmd.Process.Signal(sig)
	select {
	case <-r.done:
		return nil
	case <-time.After(grace):
		_ = r.cmd.Process.Kill()
		<-r.done
		return fmt.Errorf("%s did not stop within %v after %v; killed", r.name, grace, sig)
	}
}

// failedSamples sums samples_failed_total over every life of every replica.
func (c *cluster) failedSamples(ctx context.Context) (float64, error) {
	var sum float64
	var errs []error
	for _, r := range c.all() {
		sum += r.failed
		if r.running() {
			v, err := c.metric(ctx, r, failedMetric)
			if err != nil {
				errs = append(errs, err)
			}
			sum += v
		}
	}
	return sum, errors.Join(errs...)
}

func (c *cluster) all() []*replica {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*replica(nil), c.replicas...)
}

func (c *cluster) runningReplicas() []*replica {
	var out []*replica
	for _, r := range c.all() {
		if r.running() {
			out = append(out, r)
		}
	}
	return out
}

// stopAll stops every process, all at once.
func (c *cluster) stopAll() {
	_ = c.stopTogether(context.Background(), c.runningReplicas(), syscall.SIGTERM, 30*time.Second)
}

// stopTogether stops reps all at once (stop, concurrently) and returns
// their errors joined.
func (c *cluster) stopTogether(ctx context.Context, reps []*replica, sig syscall.Signal, grace time.Duration) error {
	errs := make([]error, len(reps))
	var wg sync.WaitGroup
	for i, r := range reps {
		wg.Go(func() { errs[i] = c.stop(ctx, r, sig, grace) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// usage is one process's cost: CPU so far, RSS, goroutines.
type usage struct {
	cpu        time.Duration
	rss        int64
	goroutines int
}

func (c *cluster) usageOf(ctx context.Context, r *replica) (usage, error) {
	var u usage
	var err error
	if u.cpu, err = harness.ProcCPU(r.cmd.Process.Pid); err != nil {
		return u, err
	}
	if u.rss, _, err = harness.ProcMem(r.cmd.Process.Pid); err != nil {
		return u, err
	}
	g, err := c.metric(ctx, r, "go_goroutines")
	u.goroutines = int(g)
	return u, err
}

// freeOnAll returns a port free for TCP and UDP on every address.
func freeOnAll(ips []string, avoid ...int) (int, error) {
	for range 50 {
		ln, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		ok := true
		for _, a := range avoid {
			ok = ok && a != port
		}
		for _, ip := range ips {
			if !ok {
				break
			}
			addr := net.JoinHostPort(ip, strconv.Itoa(port))
			l, err := net.Listen("tcp", addr)
			if err != nil {
				ok = false
				break
			}
			l.Close()
			u, err := net.ListenPacket("udp", addr)
			if err != nil {
				ok = false
				break
			}
			u.Close()
		}
		if ok {
			return port, nil
		}
	}
	return 0, errors.New("no port free on every replica address")
}
