//go:build !linux

// Command bench is hookgate's load benchmark. It needs Linux (CPU affinity,
// /proc); see bench/README.md.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "bench: Linux only (CPU affinity and /proc)")
	os.Exit(1)
}
