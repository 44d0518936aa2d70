package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"sort"
)

// version is overridden at link time (-ldflags "-X main.version=v1.2.3");
// otherwise the module version recorded by the Go toolchain is used.
var version = ""

func gatewayVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func runVersion(_ context.Context, args []string, _ io.Reader, stdout, _ io.Writer) error {
	fs := newFlagSet("version", "print the gateway's version", stdout)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "hookgate", gatewayVersion())
	return nil
}

func printUsage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "usage: gateway <command> [flags]\n\ncommands:")
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'gateway <command> --help' for a command's flags.")
}
