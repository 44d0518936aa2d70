package sandbox

// The confinement of the sandboxed command.
//
// Command.Start does not start the command itself. It re-executes its own
// binary (/proc/self/exe) as the hidden subcommand `gateway sandbox
// __init` (see IsInit and RunInit), in the sandbox's network namespace and
// in new PID and mount namespaces (CLONE_NEWPID|CLONE_NEWNS). That
// process, PID 1 of the new PID namespace and still root:
//
//  1. makes every mount a slave of the host's (nothing it mounts goes back)
//     and mounts a fresh /proc, which shows only the sandbox's processes:
//     the gateway's /proc/PID/ns/* are out of reach;
//  2. on the one OS thread it then forks from, empties the capability
//     bounding set and the ambient and inheritable sets, sets the secure
//     bits that keep root from regaining capabilities (SECBIT_NOROOT,
//     locked; no ambient raise, locked), keeps only CAP_SETUID and
//     CAP_SETGID in its effective and permitted sets, sets no_new_privs,
//     and installs a seccomp filter that refuses the ioctls that push
//     input into a terminal (TIOCSTI, TIOCLINUX);
//  3. forks the command from that thread with setgroups([]), setgid and
//     setuid to the chosen user (syscall.Credential, in the child, before
//     exec), so that the command starts with every capability set empty
//     and no_new_privs, and cannot gain privileges through setuid binaries
//     or file capabilities;
//  4. stays as the namespace's init: it passes on the signals the gateway
//     forwards to it (to the command's process group, which holds the
//     terminal's foreground when there is one), reaps orphans and exits
//     with the command's status (128+N when it died of signal N). When it
//     exits the kernel kills whatever is left in the namespace.
//
// SysProcAttr alone cannot do this: it has no bounding-set drop, no
// no_new_privs and no way to mount /proc between clone and exec.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Secure bits (linux/securebits.h).
const (
	secbitNoroot                 = 1 << 0
	secbitNorootLocked           = 1 << 1
	secbitKeepCapsLocked         = 1 << 5
	secbitNoCapAmbientRaise      = 1 << 6
	secbitNoCapAmbientRaiseLockd = 1 << 7
)

// initArgs is the argument list of the init process for argv, run as u in
// dir, path being argv[0] as found in PATH: `sandbox __init UID GID DIR
// PATH ARGV0 ARGS...`.
func initArgs(u User, dir, path string, argv []string) []string {
	return append([]string{initCommand, initSubcommand,
		strconv.FormatUint(uint64(u.UID), 10), strconv.FormatUint(uint64(u.GID), 10), dir, path}, argv...)
}

// The init's command line starts with these (after the binary's name).
// Not for users: Command.Start runs it.
const (
	initCommand    = "sandbox"
	initSubcommand = "__init"
)

// IsInit reports whether args (the program's arguments, os.Args[1:]) make
// this process a sandbox's init, which RunInit must then run.
func IsInit(args []string) bool {
	return len(args) >= 2 && args[0] == initCommand && args[1] == initSubcommand
}

// RunInit is the sandbox's init (see the top of this file), for the
// arguments IsInit accepted. It prints its errors to stderr (the
// command's) as "gateway: ..." and returns the exit status: the
// command's, 126 when the command could not be started or confined, 127
// when it does not exist, 2 when the init was not started by Command.Start.
func RunInit(args []string, stderr io.Writer) int {
	code, msg := runInit(args[2:])
	if msg != "" {
		fmt.Fprintln(stderr, "gateway:", msg)
	}
	return code
}

// runInit returns the init's exit status and the message to print.
func runInit(args []string) (code int, msg string) {
	if os.Getpid() != 1 || len(args) < 5 {
		return 2, fmt.Sprintf("usage: %s %s is started by `gateway sandbox exec`, not by hand", initCommand, initSubcommand)
	}
	// This goroutine's thread gets the reduced credentials and forks the
	// command; it is never unlocked, so no other goroutine runs on it.
	runtime.LockOSThread()
	syscall.CloseOnExec(initStartedFD) // never the command's
	uid, err := parseID(args[0])
	if err != nil {
		return 1, err.Error()
	}
	gid, err := parseID(args[1])
	if err != nil {
		return 1, err.Error()
	}
	dir, path, argv := args[2], args[3], args[4:]
	// No signal may end the init: Go's default for most of them is to
	// exit. Handlers (unlike SIG_IGN) are reset by exec, so the command
	// still gets the default dispositions. What the gateway forwards is
	// passed on once the command runs (see forwardSignals).
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs)
	if err := mountPrivateProc(); err != nil {
		return 126, "sandbox exec: " + err.Error()
	}
	if err := confineThread(); err != nil {
		return 126, "sandbox exec: dropping privileges: " + err.Error()
	}
	sys := &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}},
		// A process group of its own, in the terminal's foreground if
		// there is one: ^C goes to the command, not to us.
		Setpgid: true,
	}
	if foregroundTTY(os.Stdin) >= 0 {
		sys.Foreground, sys.Ctty = true, 0
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Dir: dir, Env: os.Environ(), Files: []uintptr{0, 1, 2}, Sys: sys,
	})
	if err != nil {
		code := 126
		if errors.Is(err, syscall.ENOENT) {
			code = 127
		}
		return code, fmt.Sprintf("sandbox exec: starting %s as %d:%d in %s: %v", argv[0], uid, gid, dir, err)
	}
	go forwardSignals(sigs, pid)
	initStarted()
	return reapUntil(pid), ""
}

// mountPrivateProc makes every mount of this (new) mount namespace a slave,
// so that nothing mounted here reaches the host, and mounts a /proc of
// this PID namespace over the host's.
func mountPrivateProc() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("making the mounts private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting the sandbox's /proc: %w", err)
	}
	return nil
}

// confineThread reduces the calling thread (capabilities are per thread)
// to what forking the command as another user needs: an empty bounding,
// ambient and inheritable set, CAP_SETUID and CAP_SETGID only, secure bits
// that keep uid 0 from regaining capabilities at exec, and no_new_privs.
// A process forked from this thread that changes to another uid, or execs
// as uid 0, ends up with every capability set empty.
func confineThread() error {
	for c := 0; c <= lastCap(); c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) && c > unix.CAP_SETPCAP {
			break // a capability newer than the kernel
		}
		if err != nil {
			return fmt.Errorf("bounding set, capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("ambient set: %w", err) // EINVAL: a kernel without ambient capabilities
	}
	bits := secbitNoroot | secbitNorootLocked | secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientRaiseLockd
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0); err != nil {
		return fmt.Errorf("secure bits: %w", err)
	}
	keep := uint32(1)<<unix.CAP_SETUID | uint32(1)<<unix.CAP_SETGID
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{{Effective: keep, Permitted: keep}}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return denyTerminalInjection()
}

// ioctlNumbers are the audit architectures a process can make system
// calls as (native and compat) and the number of ioctl(2) in each; on
// amd64 also the x32 number (native architecture, x32 bit set).
type ioctlNumbers struct {
	native, nativeNR, x32NR, compat, compatNR uint32
}

// ioctlNumbersFor returns the ioctlNumbers of goarch; false for an
// architecture without them.
func ioctlNumbersFor(goarch string) (ioctlNumbers, bool) {
	switch goarch {
	case "amd64":
		return ioctlNumbers{native: unix.AUDIT_ARCH_X86_64, nativeNR: 16, x32NR: 0x40000000 | 514, compat: unix.AUDIT_ARCH_I386, compatNR: 54}, true
	case "arm64":
		return ioctlNumbers{native: unix.AUDIT_ARCH_AARCH64, nativeNR: 29, x32NR: 29, compat: unix.AUDIT_ARCH_ARM, compatNR: 54}, true
	}
	return ioctlNumbers{}, false
}

// denyTerminalInjection installs, on the calling thread (and so on the
// command forked from it), a seccomp filter that fails ioctl(TIOCSTI) and
// ioctl(TIOCLINUX) with EPERM. With the terminal of the user who ran
// `sudo gateway sandbox exec`, TIOCSTI would let the command type
// commands into that user's (root) shell once the sandbox has ended. The
// filter needs no_new_privs (set just before). On architectures other than
// amd64 and arm64 there is no filter: the kernel's dev.tty.legacy_tiocsti=0
// is the only protection there.
func denyTerminalInjection() error {
	nums, ok := ioctlNumbersFor(runtime.GOARCH)
	if !ok {
		return nil
	}
	const (
		offNR   = 0
		offArch = 4
		offArg1 = 16 + 8 // args[1], its low 32 bits (little-endian)
		ld      = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq     = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret     = unix.BPF_RET | unix.BPF_K
	)
	// Jump offsets count from the next instruction; allow is at 11, deny at 12.
	prog := []unix.SockFilter{
		/* 0 */ {Code: ld, K: offArch},
		/* 1 */ {Code: jeq, K: nums.native, Jt: 0, Jf: 3}, // else 5
		/* 2 */ {Code: ld, K: offNR},
		/* 3 */ {Code: jeq, K: nums.nativeNR, Jt: 4, Jf: 0}, // 8
		/* 4 */ {Code: jeq, K: nums.x32NR, Jt: 3, Jf: 6}, // 8, else 11
		/* 5 */ {Code: jeq, K: nums.compat, Jt: 0, Jf: 5}, // else 11
		/* 6 */ {Code: ld, K: offNR},
		/* 7 */ {Code: jeq, K: nums.compatNR, Jt: 0, Jf: 3}, // else 11
		/* 8 */ {Code: ld, K: offArg1},
		/* 9 */ {Code: jeq, K: unix.TIOCSTI, Jt: 2, Jf: 0}, // 12
		/* 10 */ {Code: jeq, K: unix.TIOCLINUX, Jt: 1, Jf: 0}, // 12
		/* 11 */ {Code: ret, K: unix.SECCOMP_RET_ALLOW},
		/* 12 */ {Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("seccomp filter: %w", err)
	}
	return nil
}

// lastCap is the highest capability the kernel knows.
func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 && n < 64 {
			return n
		}
	}
	return unix.CAP_LAST_CAP
}

// initStartedFD is the pipe on which the init tells the gateway that the
// command runs and signals can be forwarded: one byte, then closed. (EOF
// without it: the init ended first.)
const initStartedFD = 3

func initStarted() {
	f := os.NewFile(initStartedFD, "started")
	_, _ = f.Write([]byte{1})
	_ = f.Close()
}

// forwarded reports whether the init passes s on to the command's process
// group: the signals the gateway forwards, and the user signals.
func forwarded(s os.Signal) bool {
	switch s {
	case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2:
		return true
	}
	return false
}

// forwardSignals passes the forwardable signals that reach the init,
// including any that came before the command started, to the command's
// process group; the rest are ignored.
func forwardSignals(sigs <-chan os.Signal, pgid int) {
	for s := range sigs {
		if forwarded(s) {
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		}
	}
}

// reapUntil waits for every child (the init inherits the orphans of the
// namespace) until pid ends, and returns pid's status as the shell would.
func reapUntil(pid int) int {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return 1 // ECHILD: cannot happen while pid is ours
		case got != pid:
			continue
		case ws.Signaled():
			return 128 + int(ws.Signal())
		default:
			return ws.ExitStatus()
		}
	}
}
