//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Linux process plumbing: CPU affinity, the fd limit, and /proc readings
// (RSS, CPU time, allowed CPUs).

// pinProcess restricts every thread of pid to cpu. sched_setaffinity acts on
// one thread, so each task in /proc/PID/task is set; threads created later
// inherit the mask of the thread that creates them. A few rounds catch
// threads born while we were walking the list.
func pinProcess(pid, cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	for round := 0; round < 5; round++ {
		tids, err := tasks(pid)
		if err != nil {
			return err
		}
		changed := false
		for _, tid := range tids {
			var cur unix.CPUSet
			if unix.SchedGetaffinity(tid, &cur) == nil && cur == set {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("sched_setaffinity(tid %d, cpu %d): %w", tid, cpu, err)
			}
			changed = true
		}
		if !changed {
			return nil
		}
	}
	return nil
}

// pinSelf pins the whole bench process (every thread) to cpu and runs it
// with GOMAXPROCS=1: the load generator and the upstream share that core.
// runtime.LockOSThread would only bind one goroutine to one thread; it
// says nothing about which core that thread runs on.
func pinSelf(cpu int) error {
	runtime.GOMAXPROCS(1)
	return pinProcess(os.Getpid(), cpu)
}

// withThreadAffinity runs f on a locked OS thread whose affinity is cpu, then
// restores the thread's previous mask. A child started by f (fork/exec
// happens on the calling thread) inherits cpu as its mask from birth, so all
// of its threads, including the Go runtime's first ones, start there.
func withThreadAffinity(cpu int, f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return err
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("sched_setaffinity(cpu %d): %w", cpu, err)
	}
	defer unix.SchedSetaffinity(0, &old) //nolint:errcheck // best effort restore
	return f()
}

// allowedCPUs returns the distinct Cpus_allowed_list values over all threads
// of pid, e.g. "0" when every thread is pinned to CPU 0.
func allowedCPUs(pid int) string {
	tids, err := tasks(pid)
	if err != nil {
		return "?"
	}
	seen := map[string]bool{}
	for _, tid := range tids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/status", pid, tid))
		if err != nil {
			continue
		}
		if v, ok := statusField(b, "Cpus_allowed_list"); ok {
			seen[v] = true
		}
	}
	var out []string
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return strings.Join(out, " | ")
}

func tasks(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out, nil
}

// raiseNofile sets the soft RLIMIT_NOFILE to the hard limit and returns it.
// syscall.Setrlimit (not x/sys) also tells the Go runtime not to restore the
// original soft limit in children, so the gateway inherits the raised one.
func raiseNofile() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	rl.Cur = rl.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	return rl.Cur, nil
}

// rssKiB is VmRSS of pid in KiB.
func rssKiB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	v, ok := statusField(b, "VmRSS")
	if !ok {
		return 0, errors.New("no VmRSS")
	}
	return strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
}

func statusField(b []byte, name string) (string, bool) {
	for _, line := range bytes.Split(b, []byte("\n")) {
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && string(k) == name {
			return strings.TrimSpace(string(v)), true
		}
	}
	return "", false
}

// cpuTime is the user+system CPU time pid has used so far.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return 0
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 13 {
		return 0
	}
	// After "pid (comm) ", f[0] is field 3 (state); utime is 14, stime 15.
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const clkTck = 100 // USER_HZ; 100 on every Linux we run on
	return time.Duration(ut+st) * time.Second / clkTck
}

// setNice sets the nice value of every thread of pid (Linux priorities are
// per thread; new threads inherit their creator's).
func setNice(pid, nice int) error {
	tids, err := tasks(pid)
	if err != nil {
		return err
	}
	for _, tid := range tids {
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("setpriority(tid %d, %d): %w", tid, nice, err)
		}
	}
	return nil
}

// cpuBusy returns, for each CPU in cpus, the time it has spent not idle
// (everything but idle and iowait in /proc/stat).
func cpuBusy(cpus ...int) []time.Duration {
	out := make([]time.Duration, len(cpus))
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil {
			continue
		}
		for i, c := range cpus {
			if c != n {
				continue
			}
			var busy int64
			for j, v := range f[1:] {
				if j == 3 || j == 4 || j >= 8 { // idle, iowait; guest fields are already in user
					continue
				}
				x, _ := strconv.ParseInt(v, 10, 64)
				busy += x
			}
			out[i] = time.Duration(busy) * time.Second / 100
		}
	}
	return out
}

// runqWait is the time the threads of pid have spent runnable but waiting
// for a CPU (/proc/PID/task/*/schedstat, second field), summed. On a pinned,
// otherwise idle core it stays near zero; when other work shares the core it
// grows: the figures of that run are then contaminated.
func runqWait(pid int) time.Duration {
	tids, err := tasks(pid)
	if err != nil {
		return 0
	}
	var sum int64
	for _, tid := range tids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			sum += v
		}
	}
	return time.Duration(sum)
}
