package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/hookgate/hookgate/hooks"
	"github.com/hookgate/hookgate/internal/srcpos"
)

// discoveryFlags are the flags that say where hooks.json files are found,
// shared by every hooks subcommand.
type discoveryFlags struct {
	workspaces stringList
	root       *string
	global     *string
	plugins    stringList
}

func addDiscoveryFlags(fs *flag.FlagSet) *discoveryFlags {
	d := &discoveryFlags{}
	fs.Var(&d.workspaces, "workspace", "workspace directory: its .agents/hooks.json is loaded; repeatable, one per workspace path;\nthe first is where commands of the root, global and plugin files run (default: current directory)")
	d.root = fs.String("root", "/", "directory standing for / : ROOT/.agents/hooks.json is the authoritative file")
	d.global = fs.String("global", hooks.DefaultGlobalFile(), "the global hooks.json (\"\": none)")
	fs.Var(&d.plugins, "plugins", "plugins directory: every DIR/*/hooks.json is loaded, its groups named plugin/group; repeatable")
	return d
}

func (d *discoveryFlags) options() hooks.LoadOptions {
	o := hooks.LoadOptions{Root: *d.root, Global: *d.global, Plugins: d.plugins}
	if len(d.workspaces) > 0 {
		o.Workspace, o.Workspaces = d.workspaces[0], d.workspaces[1:]
	}
	return o
}

// parseWithArg parses flags with at most one positional argument, which
// may come before or after them; "" when there is none.
func parseWithArg(fs *flag.FlagSet, args []string, cmd string) (string, error) {
	var arg string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		arg, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return "", err
	}
	if arg == "" && fs.NArg() > 0 {
		arg = fs.Arg(0)
		if fs.NArg() > 1 {
			return "", fmt.Errorf("%w: %s: unexpected argument %q", errUsage, cmd, fs.Arg(1))
		}
	} else if fs.NArg() > 0 {
		return "", fmt.Errorf("%w: %s: unexpected argument %q", errUsage, cmd, fs.Arg(0))
	}
	return arg, nil
}

// hookRow is one loaded hook handler: the `hooks list` view.
type hookRow struct {
	File     string   `json:"file"`
	Line     int      `json:"line"`
	Source   string   `json:"source"`
	Dialect  string   `json:"dialect"`
	Group    string   `json:"group"`
	Event    string   `json:"event"`
	Matcher  string   `json:"matcher"`
	Handler  string   `json:"handler"`
	Enabled  bool     `json:"enabled"`
	Problems []string `json:"problems"`
}

func runHooksList(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("hooks list", "list every loaded hook, one row per handler", stderr)
	where := addDiscoveryFlags(fs)
	asJSON := fs.Bool("json", false, "print a JSON array of rows")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: hooks list: unexpected argument %q", errUsage, fs.Arg(0))
	}
	loaded, problems, err := hooks.Load(where.options())
	if err != nil {
		return err
	}
	rows := hookRows(loaded, problems)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tDIALECT\tGROUP\tEVENT\tMATCHER\tHANDLER\tENABLED\tPROBLEMS")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s:%d\t%s\t%s\t%s\t%s\t%s\t%t\t%s\n", r.File, r.Line, r.Dialect, r.Group, r.Event,
			r.Matcher, r.Handler, r.Enabled, strings.Join(r.Problems, " | "))
	}
	return tw.Flush()
}

// hookRows flattens the loaded hooks into rows, in run order, each with
// the problems reported about its handler or its rule's matcher.
func hookRows(h *hooks.Hooks, problems srcpos.Errors) []hookRow {
	rows := []hookRow{}
	for _, g := range h.Groups {
		for _, kind := range hooks.EventKinds() {
			for _, r := range g.Rules[kind] {
				for _, hd := range r.Handlers {
					row := hookRow{
						File: g.File, Line: hd.Line, Source: string(g.Source), Dialect: string(g.Dialect),
						Group: g.Name, Event: string(kind), Matcher: describeMatcher(kind, r.Matcher),
						Handler: describeHandler(hd), Enabled: g.Enabled, Problems: []string{},
					}
					for _, p := range problems {
						if p.File == g.File && (within(p.Field, hd.Field) || p.Field == r.Field+".matcher") {
							row.Problems = append(row.Problems, fmt.Sprintf("%s: %s", p.Severity, p.Msg))
						}
					}
					rows = append(rows, row)
				}
			}
		}
	}
	return rows
}

// within reports whether field is path or inside it.
func within(field, path string) bool {
	return field == path || strings.HasPrefix(field, path+".") || strings.HasPrefix(field, path+"[")
}

func runHooksSetEnabled(enable bool, args []string, stdout, stderr io.Writer) error {
	verb := map[bool]string{true: "enable", false: "disable"}[enable]
	cmd := "hooks " + verb
	fs := newFlagSet(cmd, verb+" a hook group in its hooks.json, changing nothing else in the file", stderr)
	where := addDiscoveryFlags(fs)
	file := fs.String("file", "", "the hooks.json to edit (default: the one loaded file that defines GROUP)")
	group, err := parseWithArg(fs, args, cmd)
	if err != nil {
		return err
	}
	if group == "" {
		return fmt.Errorf("%w: %s: missing GROUP", errUsage, cmd)
	}
	path, key, err := groupFile(where.options(), group, *file)
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	out, changed, err := hooks.SetEnabled(data, key, enable)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", cmd, path, err)
	}
	if !changed {
		fmt.Fprintf(stdout, "group %q in %s is already %sd\n", group, path, verb)
		return nil
	}
	if err := hooks.WriteFileAtomic(path, out); err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	fmt.Fprintf(stdout, "group %q in %s %sd\n", group, path, verb)
	return nil
}

// groupFile finds the file to edit for group and the group's key in it:
// the given file, or else the one loaded file that defines the group. The
// root file is refused: it is authoritative, and cannot be changed from
// here.
func groupFile(opts hooks.LoadOptions, group, file string) (string, string, error) {
	loaded, _, err := hooks.Load(opts)
	if err != nil {
		return "", "", err
	}
	if file != "" {
		abs, err := filepath.Abs(file)
		if err != nil {
			return "", "", err
		}
		if sameFile(abs, loaded.RootFile) {
			return "", "", fmt.Errorf("%s is the root file, which is authoritative: its groups cannot be enabled or disabled", abs)
		}
		key := group
		for _, g := range loaded.Groups {
			if g.Name == group && sameFile(g.File, abs) {
				key = g.Key // a plugin's group, named plugin/group
			}
		}
		return abs, key, nil
	}
	var found []*hooks.Group
	for _, g := range loaded.Groups {
		if g.Name == group {
			found = append(found, g)
		}
	}
	switch {
	case len(found) == 0:
		return "", "", errors.New(noGroupMessage(loaded, group))
	case len(found) > 1:
		files := make([]string, len(found))
		for i, g := range found {
			files[i] = g.File
		}
		return "", "", fmt.Errorf("group %q is defined in %s; say which with --file", group, strings.Join(files, " and "))
	case found[0].Source == hooks.SourceRoot:
		return "", "", fmt.Errorf("group %q is in the root file %s, which is authoritative: it cannot be enabled or disabled", group, found[0].File)
	}
	return found[0].File, found[0].Key, nil
}

func noGroupMessage(h *hooks.Hooks, group string) string {
	var names []string
	for _, g := range h.Groups {
		if g.Source != hooks.SourceRoot && !slices.Contains(names, g.Name) {
			names = append(names, g.Name)
		}
	}
	if len(names) == 0 {
		return fmt.Sprintf("no group %q in the hooks.json files found (none has groups that can be changed)", group)
	}
	return fmt.Sprintf("no group %q in the hooks.json files found; groups that can be changed: %s", group, strings.Join(names, ", "))
}

func sameFile(a, b string) bool {
	ia, err := os.Stat(a)
	if err != nil {
		return a == b
	}
	ib, err := os.Stat(b)
	if err != nil {
		return false
	}
	return os.SameFile(ia, ib)
}
