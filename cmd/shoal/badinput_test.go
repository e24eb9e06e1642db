package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/promslog"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// TestMain lets a test run the real main() in a child process (the exit
// code is part of the contract): SHOAL_TEST_MAIN_ARGS holds the arguments,
// separated by newlines.
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv("SHOAL_TEST_MAIN_ARGS"); ok {
		os.Args = append([]string{"shoal"}, strings.Split(args, "\n")...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runMain runs main() with args in a child process and returns its exit
// code and stderr; a process that does not exit within a minute is a failure.
func runMain(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SHOAL_TEST_MAIN_ARGS="+strings.Join(args, "\n"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("shoal %v did not exit within a minute; stderr:\n%s", args, stderr.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// badConfig is a configuration file that must be refused, at start and on
// reload, with an error containing every string of want ("$FILE" stands for
// the file's path).
type badConfigCase struct {
	name string
	// files are written into a fresh directory; "shoal.yml" is the
	// --config.file. "$DIR" in a content is replaced by the directory.
	files map[string]string
	want  []string
}

func badConfigCases() []badConfigCase {
	const job = "scrape_configs:\n  - job_name: a\n    static_configs: [{targets: ['127.0.0.1:1']}]\n"
	return []badConfigCase{
		{"malformed yaml", map[string]string{"shoal.yml": "scrape_configs:\n  - job_name: [a\n"}, []string{"$FILE", "line 2", "did not find expected"}},
		{"tab indentation", map[string]string{"shoal.yml": "global:\n\tscrape_interval: 1s\n"}, []string{"$FILE", "line 2", "found character that cannot start any token"}},
		{"unknown top-level field", map[string]string{"shoal.yml": job + "scrape_configz: []\n"}, []string{"$FILE", "line 4", "field scrape_configz not found"}},
		{"unknown nested field", map[string]string{"shoal.yml": "global:\n  scrape_interval: 1s\n  scrape_intervall: 5s\n"}, []string{"$FILE", "line 3", "field scrape_intervall not found"}},
		{"bad duration", map[string]string{"shoal.yml": "global:\n  scrape_interval: 5 minutes\n"}, []string{"$FILE", `unknown unit " minutes" in duration "5 minutes"`}},
		{"timeout above interval", map[string]string{"shoal.yml": "global:\n  scrape_interval: 1s\n  scrape_timeout: 5s\n"}, []string{"$FILE", "scrape timeout greater than scrape interval"}},
		{"wrong type", map[string]string{"shoal.yml": "global:\n  external_labels: [a, b]\n"}, []string{"$FILE", "line 2", "cannot unmarshal"}},
		{"invalid relabel regexp", map[string]string{"shoal.yml": job + "    relabel_configs:\n      - source_labels: [__address__]\n        regex: '(unclosed'\n        target_label: x\n"}, []string{"$FILE", "missing closing )", "(unclosed"}},
		{"invalid relabel action", map[string]string{"shoal.yml": job + "    relabel_configs:\n      - action: explode\n"}, []string{"$FILE", "unknown relabel action", "explode"}},
		{"duplicate job names", map[string]string{"shoal.yml": job + "  - job_name: a\n    static_configs: [{targets: ['127.0.0.1:2']}]\n"}, []string{"$FILE", `found multiple scrape configs with job name "a"`}},
		{"duplicate job across scrape_config_files", map[string]string{
			"shoal.yml":  job + "scrape_config_files: ['$DIR/more-*.yml']\n",
			"more-1.yml": job,
		}, []string{"more-1.yml", `found multiple scrape configs with job name "a"`}},
		{"unreadable scrape_config_files", map[string]string{
			"shoal.yml":          "scrape_config_files: ['$DIR/jobs-*.yml']\n",
			"jobs-1.yml/ignored": "a directory where a file was expected",
		}, []string{"jobs-1.yml", "is a directory"}},
		{"scrape_config_files with an unknown field", map[string]string{
			"shoal.yml":  "scrape_config_files: ['$DIR/jobs-*.yml']\n",
			"jobs-1.yml": "scrape_configs:\n  - job_name: b\n    static_configz: []\n",
		}, []string{"jobs-1.yml", "line 3", "field static_configz not found"}},
		{"missing config file", map[string]string{}, []string{"$FILE", "no such file or directory"}},
		{"rule files in agent mode", map[string]string{"shoal.yml": "rule_files: ['rules.yml']\n"}, []string{"$FILE", "agent mode"}},
		{"remote write without url", map[string]string{"shoal.yml": "remote_write:\n  - name: x\n"}, []string{"$FILE", "url for remote_write is empty"}},
		{"remote write with a missing CA file", map[string]string{"shoal.yml": job + "remote_write:\n  - url: https://127.0.0.1:1/api/v1/write\n    tls_config: {ca_file: $DIR/missing-ca.pem}\n"}, []string{"missing-ca.pem", "no such file"}},
	}
}

// write puts the case's files into dir and returns the --config.file path.
func (c badConfigCase) write(t *testing.T, dir string) string {
	t.Helper()
	for name, content := range c.files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, path, strings.ReplaceAll(content, "$DIR", dir))
	}
	return filepath.Join(dir, "shoal.yml")
}

func (c badConfigCase) check(t *testing.T, file, got string) {
	t.Helper()
	for _, w := range c.want {
		w = strings.ReplaceAll(w, "$FILE", file)
		if !strings.Contains(got, w) {
			t.Errorf("%s: error %q lacks %q", c.name, got, w)
		}
	}
}

// TestBadInputAtStartExits2 runs the real main() on each bad configuration
// file, web configuration and flag combination: each exits with code 2 and
// a message naming the file (and the line where YAML gives one) or the flag
// and the problem.
func TestBadInputAtStartExits2(t *testing.T) {
	base := func(dir, cfg string) []string {
		return []string{"--config.file=" + cfg, "--storage.path=" + filepath.Join(dir, "data"), "--web.listen-address=" + freeAddr(t)}
	}
	for _, c := range badConfigCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := c.write(t, dir)
			code, stderr := runMain(t, base(dir, cfg)...)
			if code != 2 {
				t.Errorf("exit code %d, want 2; stderr:\n%s", code, stderr)
			}
			c.check(t, cfg, stderr)
		})
	}

	const good = "scrape_configs: []\n"
	webCases := []struct {
		name, content string
		want          []string
	}{
		{"web config missing", "", []string{"--web.config.file=", "no such file"}},
		{"web config unknown field", "tls_server_config:\n  cert_fil: x.pem\n", []string{"--web.config.file=", "line 2", "field cert_fil not found"}},
		{"web config missing cert", "tls_server_config:\n  cert_file: $DIR/none.pem\n  key_file: $DIR/none.key\n", []string{"--web.config.file=", "none.pem"}},
		{"web config cert without key", "tls_server_config:\n  cert_file: $DIR/none.pem\n", []string{"--web.config.file=", "missing one of key or key_file"}},
		{"web config bad user hash", "basic_auth_users:\n  ops: not-a-bcrypt-hash\n", []string{"--web.config.file=", "bcrypt"}},
		{"web config malformed", "basic_auth_users: [\n", []string{"--web.config.file=", "yaml"}},
	}
	for _, c := range []struct{ name, content, want string }{
		{"web client config missing", "", "no such file"},
		{"web client config unknown field", "basic_auth:\n  username: u\n  pasword_file: pw\n", "field pasword_file not found"},
		{"web client config password and file", "basic_auth:\n  username: u\n  password: p\n  password_file: pw\n", "at most one of basic_auth password"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := filepath.Join(dir, "shoal.yml")
			writeFile(t, cfg, good)
			clientCfg := filepath.Join(dir, "client.yml")
			if c.content != "" {
				writeFile(t, clientCfg, c.content)
			}
			code, stderr := runMain(t, append(base(dir, cfg), "--web.client-config.file="+clientCfg)...)
			if code != 2 {
				t.Errorf("exit code %d, want 2; stderr:\n%s", code, stderr)
			}
			for _, w := range []string{"--web.client-config.file=", clientCfg, c.want} {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
		})
	}
	for _, c := range webCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := filepath.Join(dir, "shoal.yml")
			writeFile(t, cfg, good)
			webCfg := filepath.Join(dir, "web.yml")
			if c.content != "" {
				writeFile(t, webCfg, strings.ReplaceAll(c.content, "$DIR", dir))
			}
			code, stderr := runMain(t, append(base(dir, cfg), "--web.config.file="+webCfg)...)
			if code != 2 {
				t.Errorf("exit code %d, want 2; stderr:\n%s", code, stderr)
			}
			for _, w := range append(c.want, webCfg) {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
		})
	}

	flagCases := []struct {
		name string
		args []string
		key  string // content of the gossip key file, if any
		want string
	}{
		{"wait-for-size without cluster", []string{"--cluster.wait-for-size=3"}, "", "--cluster.wait-for-size is set but --cluster.enabled is not"},
		{"replication factor without cluster", []string{"--cluster.replication-factor=2"}, "", "--cluster.replication-factor is set but --cluster.enabled is not"},
		{"join without cluster", []string{"--cluster.join=127.0.0.1:7946"}, "", "--cluster.join is set but --cluster.enabled is not"},
		{"key file without cluster", []string{"--cluster.secret-key-file=$DIR/key"}, "0123456789abcdef", "--cluster.secret-key-file is set but --cluster.enabled is not"},
		{"replication factor 0", []string{"--cluster.enabled", "--cluster.replication-factor=0"}, "", "--cluster.replication-factor must be at least 1"},
		{"tokens 0", []string{"--cluster.enabled", "--cluster.tokens=0"}, "", "--cluster.tokens must be between 1 and"},
		{"tokens not a number", []string{"--cluster.tokens=many"}, "", "--cluster.tokens=many"},
		{"negative wait-for-size", []string{"--cluster.enabled", "--cluster.wait-for-size=-1"}, "", "--cluster.wait-for-size must not be negative"},
		{"bad duration flag", []string{"--cluster.wait-timeout=soon"}, "", "--cluster.wait-timeout=soon"},
		{"handoff timeout 0", []string{"--cluster.enabled", "--cluster.handoff-timeout=0s"}, "", "--cluster.handoff-timeout must be positive"},
		{"replica label reserved", []string{"--cluster.enabled", "--cluster.replica-label=__rank"}, "", "--cluster.replica-label"},
		{"segment size too small", []string{"--storage.wal.segment-size=1KB"}, "", "--storage.wal.segment-size must be at least"},
		{"unknown flag", []string{"--cluster.enable"}, "", "unknown long flag '--cluster.enable'"},
		{"gossip key 10 bytes", []string{"--cluster.enabled", "--cluster.listen-address=127.0.0.1:0", "--cluster.secret-key-file=$DIR/key"}, "key-of-10b", "holds 10 bytes; the gossip key must be 16, 24 or 32 bytes"},
		{"gossip key file missing", []string{"--cluster.enabled", "--cluster.listen-address=127.0.0.1:0", "--cluster.secret-key-file=$DIR/nokey"}, "", "--cluster.secret-key-file"},
	}
	for _, c := range flagCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := filepath.Join(dir, "shoal.yml")
			writeFile(t, cfg, good)
			if c.key != "" {
				writeFile(t, filepath.Join(dir, "key"), c.key)
			}
			args := base(dir, cfg)
			for _, a := range c.args {
				args = append(args, strings.ReplaceAll(a, "$DIR", dir))
			}
			code, stderr := runMain(t, args...)
			if code != 2 {
				t.Errorf("exit code %d, want 2; stderr:\n%s", code, stderr)
			}
			if !strings.Contains(stderr, c.want) {
				t.Errorf("stderr %q lacks %q", stderr, c.want)
			}
			if c.key != "" && strings.Contains(stderr, c.key) {
				t.Errorf("the gossip key appears in the error: %q", stderr)
			}
		})
	}
}

// startAgent runs the agent in-process with args and its log in a buffer,
// until the test ends, and waits until it is ready, asking with client over
// scheme (http or https).
func startAgent(t *testing.T, client *http.Client, scheme string, args ...string) (base string, log *testutil.LogBuffer) {
	t.Helper()
	f, err := parseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	log = &testutil.LogBuffer{}
	f.log = promslog.Config{Writer: log}
	base = scheme + "://" + f.listenAddress
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, f) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("agent did not stop within 30s of cancellation")
		}
	})
	testutil.Eventually(t, 30*time.Second, "readiness", func() error {
		select {
		case err := <-done:
			t.Fatalf("agent stopped: %v\n%s", err, log)
		default:
		}
		resp, err := client.Get(base + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	})
	return base, log
}

// agentMetric reads one series from the agent's /metrics.
func agentMetric(client *http.Client, base, name string, lbls map[string]string) (float64, error) {
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	mfs, err := testutil.ParseText(resp.Body)
	if err != nil {
		return 0, err
	}
	return testutil.Value(mfs, name, lbls)
}

// TestBadConfigReloadsAreRefused applies every bad configuration of
// badConfigCases to a running agent, alternately by POST /-/reload and by
// SIGHUP: each is refused with the problem named (in the answer, and in the
// log), counted in shoal_config_reload_failures_total with
// shoal_config_last_reload_successful at 0, and the old job keeps being
// scraped. A good file then reloads.
func TestBadConfigReloadsAreRefused(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "shoal.yml")
	target := metricsTarget(t)
	good := scrapeConfig(map[string]string{"a": strings.TrimPrefix(target.URL, "http://")})
	writeFile(t, cfgPath, good)
	base, log := startAgent(t, http.DefaultClient, "http", "--config.file="+cfgPath, "--storage.path="+filepath.Join(dir, "data"), "--web.listen-address="+freeAddr(t))
	testutil.EventuallyTrue(t, 30*time.Second, "job a active", func() bool { return activeJobs(t, base)["a"] == 1 })

	appended := func() float64 {
		v, err := agentMetric(http.DefaultClient, base, "shoal_wal_samples_appended_total", map[string]string{"type": "float"})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for i, c := range badConfigCases() {
		// Each case in its own directory, its --config.file copied over the agent's.
		cdir := filepath.Join(dir, fmt.Sprintf("case-%d", i))
		if err := os.Mkdir(cdir, 0o755); err != nil {
			t.Fatal(err)
		}
		src := c.write(t, cdir)
		if err := os.Remove(cfgPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(src); err == nil {
			writeFile(t, cfgPath, string(b))
		} // else: the "missing config file" case

		before := appended()
		logBefore := len(log.String())
		if i%2 == 0 {
			resp, err := http.Post(base+"/-/reload", "", nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusInternalServerError {
				t.Errorf("%s: POST /-/reload answered %d, want 500", c.name, resp.StatusCode)
			}
			c.check(t, cfgPath, strings.ReplaceAll(string(body), cdir, dir))
		} else if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 10*time.Second, c.name+": refusal counted", func() error {
			v, err := agentMetric(http.DefaultClient, base, "shoal_config_reload_failures_total", nil)
			if err != nil || v != float64(i+1) {
				return fmt.Errorf("shoal_config_reload_failures_total = %v (%v), want %d", v, err, i+1)
			}
			return nil
		})
		if v, err := agentMetric(http.DefaultClient, base, "shoal_config_last_reload_successful", nil); err != nil || v != 0 {
			t.Errorf("%s: shoal_config_last_reload_successful = %v (%v), want 0", c.name, v, err)
		}
		logged := log.String()[logBefore:]
		if !strings.Contains(logged, "Configuration reload failed") {
			t.Errorf("%s: no log line for the refused reload:\n%s", c.name, logged)
		}
		c.check(t, cfgPath, strings.ReplaceAll(strings.ReplaceAll(logged, `\"`, `"`), cdir, dir))
		if jobs := activeJobs(t, base); jobs["a"] != 1 || len(jobs) != 1 {
			t.Fatalf("%s: after a refused reload, active jobs %v, want only a", c.name, jobs)
		}
		testutil.EventuallyTrue(t, 10*time.Second, c.name+": job a still scraped", func() bool { return appended() > before })
	}

	writeFile(t, cfgPath, good)
	resp, err := http.Post(base+"/-/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("good file: %d", resp.StatusCode)
	}
	if v, err := agentMetric(http.DefaultClient, base, "shoal_config_last_reload_successful", nil); err != nil || v != 1 {
		t.Errorf("after a good reload shoal_config_last_reload_successful = %v (%v), want 1", v, err)
	}
}
