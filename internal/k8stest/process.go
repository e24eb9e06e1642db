package k8stest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one child program whose output goes to a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once the process has exited
	err     error         // its exit error, valid once done is closed
}

// startProcess starts bin with args, output appended to logPath. The child
// gets SIGKILL if the test binary dies first (a panic or a test timeout), so
// that no API server outlives its test on a shared machine.
func startProcess(name, bin string, args []string, logPath string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "=== k8stest: %s %s\n", bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		fmt.Fprintf(logf, "=== k8stest: %s exited: %v\n", name, p.err)
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// childEnv is this process' environment without etcd's ETCD_* variables,
// which would override the flags, and without the in-cluster variables.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "ETCD_") || strings.HasPrefix(kv, "KUBERNETES_SERVICE_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// exited returns an error with the tail of the log once the process has
// exited, and nil while it runs.
func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v; last lines of %s:\n%s", p.name, p.err, p.logPath, p.tail(20))
	default:
		return nil
	}
}

// stop sends SIGTERM, and SIGKILL if the process is still there after grace.
func (p *process) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s did not stop within %v of SIGTERM; killed", p.name, grace)
}

// tail returns the last n lines of the log.
func (p *process) tail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitUntil polls check until it succeeds, the process exits (an error
// with its log) or timeout passes (check's last error).
func (p *process) waitUntil(timeout time.Duration, what string, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := p.exited(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not reached within %v: %w; last lines of %s:\n%s", what, timeout, err, p.logPath, p.tail(20))
		}
		select {
		case <-p.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePorts returns n distinct TCP ports free on ip at the time of the call.
func freePorts(ip string, n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return nil, fmt.Errorf("probing a free port on %s: %w", ip, err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func hostPort(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }
