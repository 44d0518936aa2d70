package main

import (
	"errors"
	"math"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// keepMemoryLimit restores the process's memory limit after the test
// (sizeGoRuntime sets it for the whole process) and starts from none.
func keepMemoryLimit(t *testing.T) {
	t.Helper()
	prev := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	t.Setenv("GOMEMLIMIT", "") // empty is unset, for the runtime too
}

func cgroupLimit(limit uint64, err error) func() (uint64, error) {
	return func() (uint64, error) { return limit, err }
}

func TestSizeGoRuntimeFromCgroup(t *testing.T) {
	keepMemoryLimit(t)
	lim, err := sizeGoRuntime(cgroupLimit(1000<<20, nil))
	if err != nil {
		t.Fatal(err)
	}
	want := int64(900 << 20)
	if lim.memoryLimit != want || lim.memoryLimitFrom != memoryLimitFromCgroup {
		t.Errorf("limits = %+v, want %d bytes from the cgroup", lim, want)
	}
	if got := debug.SetMemoryLimit(-1); got != want {
		t.Errorf("runtime memory limit = %d, want %d", got, want)
	}
	if lim.maxProcs != runtime.GOMAXPROCS(0) {
		t.Errorf("maxProcs = %d, want GOMAXPROCS %d", lim.maxProcs, runtime.GOMAXPROCS(0))
	}
}

// An operator's GOMEMLIMIT wins: the cgroup is not even read.
func TestSizeGoRuntimeKeepsGOMEMLIMIT(t *testing.T) {
	keepMemoryLimit(t)
	t.Setenv("GOMEMLIMIT", "512MiB")
	debug.SetMemoryLimit(512 << 20) // what the runtime read from it at start
	lim, err := sizeGoRuntime(func() (uint64, error) {
		t.Error("the cgroup was read although GOMEMLIMIT is set")
		return 1 << 30, nil
	})
	if err != nil || lim.memoryLimit != 512<<20 || lim.memoryLimitFrom != memoryLimitFromEnv {
		t.Errorf("limits = %+v, %v; want 512 MiB from GOMEMLIMIT", lim, err)
	}
	if got := debug.SetMemoryLimit(-1); got != 512<<20 {
		t.Errorf("runtime memory limit = %d, want it left at 512 MiB", got)
	}

	t.Setenv("GOMEMLIMIT", "off")
	debug.SetMemoryLimit(math.MaxInt64)
	lim, err = sizeGoRuntime(func() (uint64, error) {
		t.Error("the cgroup was read although GOMEMLIMIT=off")
		return 1 << 30, nil
	})
	if err != nil || lim.memoryLimit != math.MaxInt64 || lim.memoryLimitFrom != memoryLimitFromNone {
		t.Errorf("GOMEMLIMIT=off: limits = %+v, %v; want none", lim, err)
	}
}

// No cgroup limit, or no cgroup: no memory limit, and no error; a cgroup
// that cannot be read is an error, and no limit either.
func TestSizeGoRuntimeWithoutLimit(t *testing.T) {
	broken := errors.New("failed to parse mountinfo")
	for _, tt := range []struct {
		name    string
		err     error
		wantErr bool
	}{
		{"no limit", memlimit.ErrNoLimit, false},
		{"no cgroup", memlimit.ErrNoCgroup, false},
		{"no cgroups here", memlimit.ErrCgroupsNotSupported, false},
		{"unreadable", broken, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			keepMemoryLimit(t)
			lim, err := sizeGoRuntime(cgroupLimit(0, tt.err))
			if (err != nil) != tt.wantErr {
				t.Errorf("err = %v, want an error: %v", err, tt.wantErr)
			}
			if lim.memoryLimit != math.MaxInt64 || lim.memoryLimitFrom != memoryLimitFromNone {
				t.Errorf("limits = %+v, want none", lim)
			}
			if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
				t.Errorf("runtime memory limit = %d, want none", got)
			}
		})
	}
}
