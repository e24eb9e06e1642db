package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// Timing used by every test. Short, so that the suite is quick; the bounds the
// tests assert are derived from these values.
const (
	scrapeInterval = time.Second
	// handoffDelay is --cluster.handoff-delay's default, which clustered
	// agents run with: the upper bound of a gained target's wait.
	handoffDelay = 2 * time.Second
	// batchSendDeadline bounds how long a sample waits in a remote-write queue.
	batchSendDeadline = 500 * time.Millisecond
	// failureDetection is how long memberlist may take to declare a silently
	// dead member dead in a cluster of three or four with the default LAN
	// settings: a failed probe (1s interval + 500ms timeout and indirect
	// probes) then the suspicion timeout (SuspicionMult 4 × probe interval,
	// with no confirmations expected in clusters this small).
	failureDetection = 6 * time.Second
)

// Deadlines for polling. Generous because the CI machine has 2 shared cores;
// they bound how long a test waits, not what it asserts.
const (
	startTimeout    = 60 * time.Second
	convergeTimeout = 90 * time.Second
	stopTimeout     = 30 * time.Second
)

var httpClient = &http.Client{Timeout: 5 * time.Second}

// ---------------------------------------------------------------------------
// Polling

// eventually calls f every pollInterval until it returns nil, and fails the
// test with f's last error when timeout passes first (testutil.Eventually at
// e2e's pace).
func eventually(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	if err := poll(timeout, f); err != nil {
		fatalf(t, "%s: not reached within %v: %v", what, timeout, err)
	}
}

// pollInterval is slower than testutil's: each check here is an HTTP round
// trip to real processes on a small shared machine.
const pollInterval = 100 * time.Millisecond

// poll calls f until it returns nil or timeout passes; it returns f's last error.
func poll(timeout time.Duration, f func() error) error {
	return testutil.PollEvery(pollInterval, timeout, f)
}

// ---------------------------------------------------------------------------
// Ports

var (
	portsMu sync.Mutex
	// usedPorts keeps this test binary from handing out a port twice, even
	// after the probe listener that found it was closed.
	usedPorts = map[string]bool{}
)

// freePort returns a port on ip that is free for both TCP and UDP (memberlist
// binds both on the gossip port).
func freePort(t testing.TB, ip string) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			fatalf(t, "probing a free port on %s: %v", ip, err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort(ip, strconv.Itoa(port)))
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		key := net.JoinHostPort(ip, strconv.Itoa(port))
		if usedPorts[key] {
			continue
		}
		usedPorts[key] = true
		return port
	}
	fatalf(t, "no free TCP+UDP port on %s", ip)
	return 0
}

// ---------------------------------------------------------------------------
// Configuration

// configOpts describes the Prometheus configuration file the agents load.
type configOpts struct {
	job            string   // default "e2e"
	targets        []string // host:port of every target
	fileSD         bool     // list targets in a file_sd JSON file instead of static_configs
	remoteWriteURL string
	externalLabels map[string]string
	// defaultQueue leaves queue_config out: Prometheus' defaults
	// (batch_send_deadline 5s), as clustered agents run in production.
	defaultQueue bool
}

// writeConfig writes the configuration (and the file_sd file) into dir and
// returns the configuration's path.
func writeConfig(t testing.TB, dir string, o configOpts) string {
	t.Helper()
	if o.job == "" {
		o.job = "e2e"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n", model.Duration(scrapeInterval), model.Duration(scrapeInterval))
	if len(o.externalLabels) > 0 {
		b.WriteString("  external_labels:\n")
		keys := make([]string, 0, len(o.externalLabels))
		for k := range o.externalLabels {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "    %s: %q\n", k, o.externalLabels[k])
		}
	}
	fmt.Fprintf(&b, "scrape_configs:\n  - job_name: %q\n", o.job)
	quoted := make([]string, len(o.targets))
	for i, tg := range o.targets {
		quoted[i] = strconv.Quote(tg)
	}
	if o.fileSD {
		sdPath := filepath.Join(dir, "targets.json")
		group := []map[string]any{{"targets": o.targets, "labels": map[string]string{"source": "file_sd"}}}
		data, err := json.Marshal(group)
		if err != nil {
			fatal(t, err)
		}
		if err := os.WriteFile(sdPath, data, 0o644); err != nil {
			fatal(t, err)
		}
		fmt.Fprintf(&b, "    file_sd_configs:\n      - files: [%q]\n        refresh_interval: 1m\n", sdPath)
	} else {
		fmt.Fprintf(&b, "    static_configs:\n      - targets: [%s]\n", strings.Join(quoted, ", "))
	}
	if o.remoteWriteURL != "" && o.defaultQueue {
		fmt.Fprintf(&b, "remote_write:\n  - url: %q\n", o.remoteWriteURL)
	} else if o.remoteWriteURL != "" {
		fmt.Fprintf(&b, "remote_write:\n  - url: %q\n    queue_config:\n      batch_send_deadline: %s\n      min_backoff: 50ms\n      max_backoff: 500ms\n",
			o.remoteWriteURL, model.Duration(batchSendDeadline))
	}
	path := filepath.Join(dir, "shoal.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		fatal(t, err)
	}
	return path
}

// ---------------------------------------------------------------------------
// Agent processes

// agentSpec says how to run one shoal process.
type agentSpec struct {
	name        string // --cluster.node-name, also the log file's name
	ip          string // every listener binds here (127.0.0.x)
	config      string // --config.file
	cluster     bool   // --cluster.enabled
	waitForSize int    // --cluster.wait-for-size
	extraArgs   []string
}

// agent is one shoal process that can be stopped and started again with the
// same name, addresses and storage path.
type agent struct {
	t          testing.TB
	spec       agentSpec
	webAddr    string
	gossipAddr string
	storage    string
	logPath    string
	// join lists the gossip addresses passed as --cluster.join.
	join []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current process has exited
	waitErr error         // the current process' exit error, valid once done is closed
}

// newAgent prepares (but does not start) an agent. Its process is killed when
// the test ends; if the test failed, the tail of its log is printed.
func newAgent(t testing.TB, spec agentSpec) *agent {
	t.Helper()
	if spec.ip == "" {
		spec.ip = "127.0.0.1"
	}
	dir := t.TempDir()
	a := &agent{
		t:          t,
		spec:       spec,
		webAddr:    net.JoinHostPort(spec.ip, strconv.Itoa(freePort(t, spec.ip))),
		gossipAddr: net.JoinHostPort(spec.ip, strconv.Itoa(freePort(t, spec.ip))),
		storage:    filepath.Join(dir, "data"),
		logPath:    filepath.Join(dir, spec.name+".log"),
	}
	t.Cleanup(func() {
		a.killIfRunning()
		if t.Failed() {
			a.dumpLog(120)
		}
	})
	return a
}

func (a *agent) args() []string {
	args := []string{
		"--config.file=" + a.spec.config,
		"--web.listen-address=" + a.webAddr,
		"--storage.path=" + a.storage,
		"--cluster.node-name=" + a.spec.name,
	}
	if a.spec.cluster {
		args = append(args,
			"--cluster.enabled",
			"--cluster.listen-address="+a.gossipAddr,
			"--cluster.advertise-address="+a.gossipAddr,
			"--cluster.rejoin-interval=5s",
		)
		for _, j := range a.join {
			args = append(args, "--cluster.join="+j)
		}
		if a.spec.waitForSize > 0 {
			args = append(args,
				"--cluster.wait-for-size="+strconv.Itoa(a.spec.waitForSize),
				"--cluster.wait-timeout=2m",
			)
		}
	}
	return append(args, a.spec.extraArgs...)
}

// start starts the process; its stdout and stderr go to the agent's log file.
func (a *agent) start() {
	a.t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done != nil {
		select {
		case <-a.done:
		default:
			fatalf(a.t, "%s: start while already running", a.spec.name)
		}
	}
	logf, err := os.OpenFile(a.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fatal(a.t, err)
	}
	args := a.args()
	fmt.Fprintf(logf, "=== e2e %s: starting %s %s\n", time.Now().Format(time.RFC3339Nano), shoalBin, strings.Join(args, " "))
	cmd := exec.Command(shoalBin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A test binary killed from outside (a timeout, Ctrl-C) leaves no shoal
	// behind to scrape loopback ports later tests reuse.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		fatalf(a.t, "%s: starting shoal: %v", a.spec.name, err)
	}
	done := make(chan struct{})
	a.cmd, a.done = cmd, done
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(logf, "=== e2e %s: process exited: %v\n", time.Now().Format(time.RFC3339Nano), err)
		logf.Close()
		a.mu.Lock()
		a.waitErr = err
		a.mu.Unlock()
		close(done)
	}()
}

func (a *agent) current() (*exec.Cmd, chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cmd, a.done
}

func (a *agent) running() bool {
	_, done := a.current()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

func (a *agent) pid() int {
	cmd, _ := a.current()
	return cmd.Process.Pid
}

// signal sends sig to the running process.
func (a *agent) signal(sig syscall.Signal) {
	a.t.Helper()
	cmd, _ := a.current()
	if err := cmd.Process.Signal(sig); err != nil {
		fatalf(a.t, "%s: sending %v: %v", a.spec.name, sig, err)
	}
}

// waitExit waits for the current process to exit and returns its exit error.
func (a *agent) waitExit(timeout time.Duration) error {
	a.t.Helper()
	_, done := a.current()
	select {
	case <-done:
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.waitErr
	case <-time.After(timeout):
		fatalf(a.t, "%s: did not exit within %v", a.spec.name, timeout)
		return nil
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (a *agent) kill() {
	a.t.Helper()
	a.signal(syscall.SIGKILL)
	_ = a.waitExit(stopTimeout)
}

// stop sends SIGTERM and requires a clean exit (status 0).
func (a *agent) stop() {
	a.t.Helper()
	a.signal(syscall.SIGTERM)
	if err := a.waitExit(stopTimeout); err != nil {
		fatalf(a.t, "%s: SIGTERM: exited with %v, want status 0", a.spec.name, err)
	}
}

func (a *agent) killIfRunning() {
	cmd, done := a.current()
	if done == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Kill()
	select {
	case <-done:
	case <-time.After(stopTimeout):
	}
}

// dumpLog prints the last n lines of the agent's log.
func (a *agent) dumpLog(n int) {
	data, err := os.ReadFile(a.logPath)
	if err != nil {
		a.t.Logf("%s: no log: %v", a.spec.name, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	a.t.Logf("---- last %d lines of %s (%s) ----\n%s\n---- end of %s ----", len(lines), a.spec.name, a.logPath, strings.Join(lines, "\n"), a.spec.name)
}

// exitedEarly returns an error when the process is no longer running, so
// that polls fail fast with the reason instead of running into a deadline.
func (a *agent) exitedEarly() error {
	if a.running() {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return fmt.Errorf("%s exited: %v (log %s)", a.spec.name, a.waitErr, a.logPath)
}

func (a *agent) url(path string) string { return "http://" + a.webAddr + path }

// waitHTTP waits until the HTTP server answers at all (any status).
func (a *agent) waitHTTP(timeout time.Duration) {
	a.t.Helper()
	eventually(a.t, timeout, a.spec.name+" HTTP up", func() error {
		if err := a.exitedEarly(); err != nil {
			fatal(a.t, err)
		}
		resp, err := httpClient.Get(a.url("/-/healthy"))
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
}

// waitReady waits until /-/ready answers 200.
func (a *agent) waitReady(timeout time.Duration) {
	a.t.Helper()
	eventually(a.t, timeout, a.spec.name+" ready", func() error {
		if err := a.exitedEarly(); err != nil {
			fatal(a.t, err)
		}
		code, why, err := readyStatus(a)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/-/ready %d: %s", code, why)
		}
		return nil
	})
}

func (a *agent) getJSON(path string, v any) error {
	resp, err := httpClient.Get(a.url(path))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", a.spec.name, path, resp.Status, bytes.TrimSpace(body))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s %s: decoding %q: %w", a.spec.name, path, body, err)
	}
	return nil
}

// activeTarget is one entry of data.activeTargets in /api/v1/targets.
type activeTarget struct {
	Labels     map[string]string `json:"labels"`
	ScrapePool string            `json:"scrapePool"`
	ScrapeURL  string            `json:"scrapeUrl"`
	Health     string            `json:"health"`
	LastScrape time.Time         `json:"lastScrape"`
	LastError  string            `json:"lastError"`
}

type targetsResponse struct {
	Status string `json:"status"`
	Data   struct {
		ActiveTargets  []activeTarget    `json:"activeTargets"`
		DroppedTargets []json.RawMessage `json:"droppedTargets"`
	} `json:"data"`
}

// activeTargets returns this agent's active targets by instance label.
func (a *agent) activeTargets() (map[string]activeTarget, error) {
	var r targetsResponse
	if err := a.getJSON("/api/v1/targets", &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s /api/v1/targets: status %q", a.spec.name, r.Status)
	}
	out := make(map[string]activeTarget, len(r.Data.ActiveTargets))
	for _, at := range r.Data.ActiveTargets {
		inst := at.Labels["instance"]
		if _, dup := out[inst]; dup {
			return nil, fmt.Errorf("%s lists target %s twice", a.spec.name, inst)
		}
		out[inst] = at
	}
	return out, nil
}

type peer struct {
	Name         string  `json:"name"`
	Address      string  `json:"address"`
	State        string  `json:"state"`
	Self         bool    `json:"self"`
	OwnedTargets int     `json:"ownedTargets"`
	RingShare    float64 `json:"ringShare"`
}

type peersResponse struct {
	Status string `json:"status"`
	Data   struct {
		Self  string `json:"self"`
		Peers []peer `json:"peers"`
	} `json:"data"`
}

func (a *agent) peers() (peersResponse, error) {
	var r peersResponse
	err := a.getJSON("/api/v1/cluster/peers", &r)
	if err == nil && r.Status != "success" {
		err = fmt.Errorf("%s /api/v1/cluster/peers: status %q", a.spec.name, r.Status)
	}
	return r, err
}

// metrics scrapes the agent's /metrics.
func (a *agent) metrics() (map[string]*dto.MetricFamily, error) {
	resp, err := httpClient.Get(a.url("/metrics"))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s /metrics: %s", a.spec.name, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// metricValue returns the value of the series of family name whose labels
// include want. Counters and gauges only. It fails when no series matches.
func (a *agent) metricValue(name string, want map[string]string) (float64, error) {
	mfs, err := a.metrics()
	if err != nil {
		return 0, err
	}
	return testutil.Value(mfs, name, want)
}

// peakRSS returns VmHWM (peak resident set size) of pid in bytes.
func peakRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			fields := strings.Fields(rest)
			if len(fields) != 2 || fields[1] != "kB" {
				return 0, fmt.Errorf("unexpected VmHWM line %q", line)
			}
			kb, err := strconv.ParseInt(fields[0], 10, 64)
			return kb * 1024, err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no VmHWM in /proc status")
}
