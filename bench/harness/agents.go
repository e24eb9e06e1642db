package harness

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Kind is the kind of agent under test.
type Kind string

// The agents the harness knows how to run.
const (
	KindShoal      Kind = "shoal"
	KindPrometheus Kind = "prometheus-agent"
	KindVMAgent    Kind = "vmagent"
)

// Agent is one contestant: a binary and how many replicas of it share the
// targets.
type Agent struct {
	// Name labels the agent in tables, e.g. "shoal x3".
	Name string
	Kind Kind
	// Binary is the path of the executable.
	Binary string
	// Replicas is the cluster size (shoal only; others always run one).
	Replicas int
	// Missing, when set, says why the agent cannot run (not built, build
	// error); the harness reports it instead of measuring.
	Missing string
}

// Version returns a one-line version of the agent's binary: its own
// --version output for shoal, and the module version recorded in the
// binary for the peers (built from module source without release ldflags,
// their --version output is empty).
func (a Agent) Version() string {
	if a.Missing != "" || a.Binary == "" {
		return "n/a"
	}
	bi, err := buildinfo.ReadFile(a.Binary)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	mod := map[Kind]string{KindPrometheus: "github.com/prometheus/prometheus", KindVMAgent: "github.com/VictoriaMetrics/VictoriaMetrics"}[a.Kind]
	if mod != "" {
		for _, d := range append([]*debug.Module{&bi.Main}, bi.Deps...) {
			if d.Path == mod {
				return moduleVersion(a.Kind, d.Version) + ", " + bi.GoVersion
			}
		}
		return "unknown module version, " + bi.GoVersion
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, a.Binary, "--version").CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if err != nil || line == "" {
		return "unknown, " + bi.GoVersion
	}
	return line
}

// runEnv is what every agent of one run gets.
type runEnv struct {
	dir            string // work directory of this agent
	promConfig     string // Prometheus-format config with remote_write
	scrapeOnly     string // the same without remote_write (vmagent)
	remoteWriteURL string
}

// process is one running agent process.
type process struct {
	name string
	web  int // its HTTP port on 127.0.0.1 (/metrics, /debug/pprof)
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // exit status, valid after done is closed
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// logTail returns the last lines of the process's log.
func (p *process) logTail() string {
	b, _ := os.ReadFile(p.log)
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > 12 {
		lines = lines[len(lines)-12:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

func startProcess(name, dir string, bin string, args ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = lf, lf
	// Its own process group, so a Ctrl-C of the harness does not hit the
	// agent before the harness stops it in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM and waits up to grace before killing.
func (p *process) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// freeUDPAndTCPPort returns a port free for both TCP and UDP (gossip uses
// both).
func freeUDPAndTCPPort() (int, error) {
	for range 20 {
		p, err := freePort()
		if err != nil {
			return 0, err
		}
		u, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err == nil {
			u.Close()
			return p, nil
		}
	}
	return 0, errors.New("no port free for both TCP and UDP")
}

// launch starts the agent's processes.
func launch(a Agent, env runEnv) ([]*process, error) {
	var procs []*process
	fail := func(err error) ([]*process, error) {
		for _, p := range procs {
			p.stop(5 * time.Second)
		}
		return nil, err
	}
	switch a.Kind {
	case KindShoal:
		n := max(a.Replicas, 1)
		var gossip []string
		for range n {
			p, err := freeUDPAndTCPPort()
			if err != nil {
				return nil, err
			}
			gossip = append(gossip, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		}
		for i := range n {
			web, err := freePort()
			if err != nil {
				return fail(err)
			}
			name := fmt.Sprintf("shoal-%d", i)
			args := []string{
				"--config.file=" + env.promConfig,
				"--web.listen-address=127.0.0.1:" + strconv.Itoa(web),
				"--storage.path=" + filepath.Join(env.dir, name),
			}
			if n > 1 {
				args = append(args,
					"--cluster.enabled",
					"--cluster.node-name="+name,
					"--cluster.listen-address="+gossip[i],
					"--cluster.advertise-address="+gossip[i],
					"--cluster.wait-for-size="+strconv.Itoa(n),
					"--cluster.wait-timeout=60s",
				)
				for j, g := range gossip {
					if j != i {
						args = append(args, "--cluster.join="+g)
					}
				}
			}
			p, err := startProcess(name, env.dir, a.Binary, args...)
			if err != nil {
				return fail(err)
			}
			p.web = web
			procs = append(procs, p)
		}
	case KindPrometheus:
		web, err := freePort()
		if err != nil {
			return nil, err
		}
		p, err := startProcess("prometheus", env.dir, a.Binary,
			"--agent",
			"--config.file="+env.promConfig,
			"--storage.agent.path="+filepath.Join(env.dir, "data-agent"),
			"--web.listen-address=127.0.0.1:"+strconv.Itoa(web),
		)
		if err != nil {
			return nil, err
		}
		p.web = web
		procs = append(procs, p)
	case KindVMAgent:
		web, err := freePort()
		if err != nil {
			return nil, err
		}
		p, err := startProcess("vmagent", env.dir, a.Binary,
			"-promscrape.config="+env.scrapeOnly,
			"-remoteWrite.url="+env.remoteWriteURL,
			// The receiver speaks the Prometheus remote-write protocol;
			// vmagent would otherwise probe for its own protocol first.
			"-remoteWrite.forcePromProto",
			"-remoteWrite.tmpDataPath="+filepath.Join(env.dir, "vmagent-data"),
			"-httpListenAddr=127.0.0.1:"+strconv.Itoa(web),
		)
		if err != nil {
			return nil, err
		}
		p.web = web
		procs = append(procs, p)
	default:
		return nil, fmt.Errorf("unknown agent kind %q", a.Kind)
	}
	return procs, nil
}

// writeConfigs writes the Prometheus-format configuration every agent
// scrapes with: one job over the load generator's file_sd file.
func writeConfigs(dir, fileSD, remoteURL string, interval time.Duration) (promCfg, scrapeOnly string, err error) {
	scrape := fmt.Sprintf(`global:
  scrape_interval: %s
  scrape_timeout: %s
scrape_configs:
  - job_name: loadgen
    file_sd_configs:
      - files: [%q]
`, interval, interval, fileSD)
	remote := fmt.Sprintf(`remote_write:
  - url: %q
`, remoteURL)
	promCfg = filepath.Join(dir, "prometheus.yml")
	scrapeOnly = filepath.Join(dir, "scrape-only.yml")
	if err := os.WriteFile(promCfg, []byte(scrape+remote), 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(scrapeOnly, []byte(scrape), 0o644); err != nil {
		return "", "", err
	}
	return promCfg, scrapeOnly, nil
}

var promModuleVersion = regexp.MustCompile(`^v0\.(\d)(\d\d)\.(\d+)$`)

// moduleVersion names a peer's release: Prometheus' Go module v0.316.0 is
// Prometheus 3.16.0.
func moduleVersion(k Kind, v string) string {
	if k == KindPrometheus {
		if m := promModuleVersion.FindStringSubmatch(v); m != nil {
			minor := strings.TrimLeft(m[2], "0")
			if minor == "" {
				minor = "0"
			}
			return "Prometheus " + m[1] + "." + minor + "." + m[3] + " (module " + v + ")"
		}
		return "Prometheus module " + v
	}
	return "vmagent " + v
}
