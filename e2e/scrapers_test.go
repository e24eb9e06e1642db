package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Which process scraped a target: two scrapes of one target closer than an
// interval mean two scrapers only if they came over different connections
// (two nodes never share one). A single scrape loop whose tick was late (a
// starved process on a loaded machine) scrapes twice within an interval
// over its one keep-alive connection: the scrape due at p+1 happens at
// p+1+d, the next on time at p+2.

// scraperOf names the process holding the client end of the TCP connection
// from client to server (both "127.0.0.1:port"): the --cluster.node-name of
// a shoal process, else "pid N", and its pid (which tells two lives of one
// node apart); "" when it cannot be told (no /proc, the connection gone).
// It reads the socket's inode from /proc/net/tcp and looks for it among the
// fds of processes with a --cluster.node-name flag.
func scraperOf(client, server string) (who, pid string) {
	inode := socketInode(client, server)
	if inode == "" {
		return "", ""
	}
	want := "socket:[" + inode + "]"
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range pids {
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), "--cluster.node-name=") {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(dir, "fd", fd.Name())); err == nil && l == want {
				pid := filepath.Base(dir)
				for _, arg := range strings.Split(string(cmdline), "\x00") {
					if name, ok := strings.CutPrefix(arg, "--cluster.node-name="); ok {
						return name, pid
					}
				}
				return "pid " + pid, pid
			}
		}
	}
	return "", ""
}

// socketInode finds the inode of the IPv4 socket whose local address is
// local and remote address remote.
func socketInode(local, remote string) string {
	l, r := procAddr(local), procAddr(remote)
	if l == "" || r == "" {
		return ""
	}
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 10 && fs[1] == l && fs[2] == r {
			return fs[9]
		}
	}
	return ""
}

// procAddr renders an IPv4 "host:port" as /proc/net/tcp does
// (little-endian address, big-endian port, hex).
func procAddr(hostport string) string {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return ""
	}
	ip := net.ParseIP(host).To4()
	p, err := strconv.Atoi(port)
	if ip == nil || err != nil {
		return ""
	}
	return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], p)
}

// scrapeBy describes scrape i of tg: its connection and, where known, the
// process that made it.
func (tg *target) scrapeBy(i int) (conn, who string) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if i < 0 || i >= len(tg.from) {
		return "", ""
	}
	conn = tg.from[i]
	return conn, tg.conns[conn]
}

// lifeOf is the pid of the process that made scrape i of tg; "" when it
// cannot be told.
func (tg *target) lifeOf(i int) string {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if i < 0 || i >= len(tg.from) {
		return ""
	}
	return tg.pids[tg.from[i]]
}
