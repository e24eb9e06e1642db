package harness

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of utime and stime in /proc/<pid>/stat. It is 100 on
// every Linux architecture Go supports (USER_HZ, fixed by the kernel ABI).
const userHZ = 100

// ProcCPU returns the CPU time (user + system) process pid has used so far.
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may contain spaces;
	// fields are counted after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime %q %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / userHZ, nil
}

// ProcMem returns the resident set size and its high-water mark (VmRSS and
// VmHWM from /proc/<pid>/status), in bytes.
func ProcMem(pid int) (rss, hwm int64, err error) {
	st, err := procStatus(pid)
	if err != nil {
		return 0, 0, err
	}
	rss, ok1 := st["VmRSS"]
	hwm, ok2 := st["VmHWM"]
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("/proc/%d/status: VmRSS or VmHWM missing", pid)
	}
	return rss, hwm, nil
}
