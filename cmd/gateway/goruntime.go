package main

import (
	"errors"
	"math"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/rs/zerolog"
)

// memoryLimitShare is the part of the container's memory limit the Go
// heap aims to stay under: the rest is for goroutine stacks, socket
// buffers the runtime does not count, and the runtime's own slack, so that
// the garbage collector works harder before the kernel's OOM killer acts.
const memoryLimitShare = 0.9

// Where the Go memory limit in force came from, as the start-up line says.
const (
	memoryLimitFromEnv    = "GOMEMLIMIT" // the environment; the runtime read it
	memoryLimitFromCgroup = "cgroup"     // memoryLimitShare of the cgroup's limit
	memoryLimitFromNone   = "none"       // no limit: GC is paced by GOGC alone
)

// goRuntimeLimits are the CPU and memory the Go runtime was sized for at
// start.
type goRuntimeLimits struct {
	maxProcs int
	// memoryLimit is the soft memory limit in bytes; math.MaxInt64: none.
	memoryLimit int64
	// memoryLimitFrom is memoryLimitFromEnv, ...FromCgroup or ...FromNone.
	memoryLimitFrom string
}

// sizeGoRuntime fits the Go runtime to the container it runs in; serve
// calls it once, at start.
//
// GOMAXPROCS needs nothing here: since Go 1.25 the runtime itself starts
// with the smaller of the CPUs it may run on and the cgroup's CPU quota
// (rounded up), and follows a quota that changes while it runs, unless
// GOMAXPROCS is set in the environment.
//
// The memory limit the runtime does not derive: without one, a gateway
// under a cgroup memory limit grows its heap to twice the live data
// (GOGC=100) and is OOM-killed during a burst of tunnels rather than
// collecting sooner. So, when the environment sets no GOMEMLIMIT (an
// operator's value, "off" included, always wins), the soft limit becomes
// memoryLimitShare of cgroupLimit, which reads the cgroup's limit (v2
// memory.max, or v1 memory.limit_in_bytes). No limit, or no cgroup, leaves
// the runtime's default (none). GOGC is left as it is.
func sizeGoRuntime(cgroupLimit func() (uint64, error)) (goRuntimeLimits, error) {
	lim := goRuntimeLimits{maxProcs: runtime.GOMAXPROCS(0), memoryLimit: debug.SetMemoryLimit(-1)}
	if os.Getenv("GOMEMLIMIT") != "" { // empty is unset, for the runtime too
		lim.memoryLimitFrom = memoryLimitFromEnv
		if lim.memoryLimit == math.MaxInt64 {
			lim.memoryLimitFrom = memoryLimitFromNone // GOMEMLIMIT=off
		}
		return lim, nil
	}
	lim.memoryLimitFrom = memoryLimitFromNone
	limit, err := cgroupLimit()
	switch {
	case errors.Is(err, memlimit.ErrNoLimit), errors.Is(err, memlimit.ErrNoCgroup), errors.Is(err, memlimit.ErrCgroupsNotSupported):
		return lim, nil
	case err != nil:
		return lim, err
	}
	share := float64(limit) * memoryLimitShare
	if share >= math.MaxInt64 {
		return lim, nil // a "limit" beyond any memory: none
	}
	lim.memoryLimit, lim.memoryLimitFrom = int64(share), memoryLimitFromCgroup
	debug.SetMemoryLimit(lim.memoryLimit)
	return lim, nil
}

// logFields adds the limits to the start-up line.
func (l goRuntimeLimits) logFields(e *zerolog.Event) *zerolog.Event {
	e = e.Int("gomaxprocs", l.maxProcs).Str("gomemlimit_from", l.memoryLimitFrom)
	if l.memoryLimit != math.MaxInt64 {
		e = e.Int64("gomemlimit_bytes", l.memoryLimit)
	}
	return e
}
