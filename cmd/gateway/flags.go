package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// newFlagSet returns a FlagSet that reports errors instead of exiting and
// prints its usage to out.
func newFlagSet(name, summary string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "usage: gateway %s [flags]\n\n%s\n\nflags:\n", name, summary)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; --help yields a nil error after printing usage
// (callers check fs.Parsed() via the returned errHelp), and bad flags are
// usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		return &exitError{code: 0}
	default:
		return fmt.Errorf("%w: %s: %v", errUsage, fs.Name(), err)
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
