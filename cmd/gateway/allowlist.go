package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/hookgate/hookgate/allowlist"
)

// maxDecisionLine bounds one line of `allowlist suggest`'s input: a
// decision line is a few hundred bytes; a longer line is skipped.
const maxDecisionLine = 1 << 20

func runAllowlist(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "suggest" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintln(stdout, "usage: gateway allowlist suggest --from FILE|- [--min-siblings N]")
			return nil
		}
		return fmt.Errorf("%w: allowlist takes one subcommand: suggest --from FILE|-", errUsage)
	}
	return runAllowlistSuggest(ctx, args[1:], stdin, stdout, stderr)
}

func runAllowlistSuggest(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("allowlist suggest", "Read decision lines (the gateway's JSON log, or a GET /v1/decisions answer)\n"+
		"and print the smallest allowlist that lets through every host the allowlist denied\n"+
		"or would have denied (verdict would-deny, network.mode: report), with counts as comments.", stdout)
	from := fs.String("from", "", "decision lines `file`; - reads stdin")
	minSiblings := fs.Int("min-siblings", 3, "write *.parent instead of the names when at least `N` names under one parent domain were seen")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *from == "" || fs.NArg() > 0 {
		return fmt.Errorf("%w: allowlist suggest needs --from FILE (or - for stdin) and no arguments", errUsage)
	}
	if *minSiblings < 2 {
		return fmt.Errorf("%w: --min-siblings must be 2 or more", errUsage)
	}
	in := stdin
	if *from != "-" {
		f, err := os.Open(*from)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	seen, err := readDecisions(in)
	if err != nil {
		return err
	}
	if seen.skipped > 0 {
		fmt.Fprintf(stderr, "gateway: allowlist suggest: skipped %d lines that are not decision lines with a valid host\n", seen.skipped)
	}
	_, err = io.WriteString(stdout, suggestAllowlist(seen, *minSiblings))
	return err
}

// denialTally is what `allowlist suggest` read: requests per host that the
// allowlist refused or would have refused.
type denialTally struct {
	hosts     map[string]int
	decisions int // decision lines read
	wouldDeny int
	denied    int
	skipped   int // lines that were neither decisions nor anything else known
}

// decisionLine holds the fields of a decision line (or of a /v1/decisions
// entry) that a suggestion needs.
type decisionLine struct {
	Message string `json:"message"`
	Kind    string `json:"kind"`
	Host    string `json:"host"`
	Verdict string `json:"verdict"`
	Code    string `json:"code"`
}

// readDecisions reads JSON lines, or one JSON array of decisions. Lines
// that are not JSON objects, and log lines other than decisions, are
// passed over: a log holds much else.
func readDecisions(r io.Reader) (*denialTally, error) {
	t := &denialTally{hosts: map[string]int{}}
	br := bufio.NewReaderSize(r, 64<<10)
	if first, err := peekNonSpace(br); err == nil && first == '[' {
		var list []decisionLine
		if err := json.NewDecoder(io.LimitReader(br, 256<<20)).Decode(&list); err != nil {
			return nil, fmt.Errorf("reading a JSON array of decisions: %v", err)
		}
		for _, d := range list {
			t.add(d)
		}
		return t, nil
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 0, 64<<10), maxDecisionLine)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var d decisionLine
		if json.Unmarshal(line, &d) != nil {
			t.skipped++
			continue
		}
		t.add(d)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading decision lines: %v (lines are at most %d bytes)", err, maxDecisionLine)
	}
	return t, nil
}

// peekNonSpace returns the first byte that is not white space, leaving it
// unread.
func peekNonSpace(br *bufio.Reader) (byte, error) {
	for {
		b, err := br.Peek(1)
		if err != nil {
			return 0, err
		}
		if !strings.ContainsRune(" \t\r\n", rune(b[0])) {
			return b[0], nil
		}
		_, _ = br.ReadByte()
	}
}

// add counts one decision if the allowlist refused it or would have.
func (t *denialTally) add(d decisionLine) {
	if d.Message != "decision" && d.Kind != "proxy" {
		return // another log line, or a DNS answer
	}
	t.decisions++
	switch {
	case d.Verdict == "would-deny":
		t.wouldDeny++
	case d.Verdict == "deny" && d.Code == "blocked-by-allowlist":
		t.denied++
	default:
		return
	}
	host, _, err := allowlist.NormalizeHost(d.Host)
	if err != nil || allowlist.IsLocalhostName(host) {
		t.skipped++
		return
	}
	if _, _, err := allowlist.ParseDomain(host); err != nil {
		t.skipped++
		return
	}
	t.hosts[host]++
}

// suggestion is one allowlist entry of a suggestion.
type suggestion struct {
	domain   string
	names    []string // the hosts it covers, sorted
	requests int
}

// suggestAllowlist turns the tally into allowlist YAML: one exact entry per
// host, except that minSiblings or more hosts directly under one parent
// domain become "*.parent" — never under a public suffix (no "*.com",
// "*.co.uk"), and never for IP literals.
func suggestAllowlist(t *denialTally, minSiblings int) string {
	byParent := map[string][]string{}
	for host := range t.hosts {
		byParent[wildcardParent(host)] = append(byParent[wildcardParent(host)], host)
	}
	var entries []suggestion
	for parent, hosts := range byParent {
		slices.Sort(hosts)
		if parent != "" && len(hosts) >= minSiblings {
			s := suggestion{domain: "*." + parent, names: hosts}
			for _, h := range hosts {
				s.requests += t.hosts[h]
			}
			entries = append(entries, s)
			continue
		}
		for _, h := range hosts {
			entries = append(entries, suggestion{domain: h, names: []string{h}, requests: t.hosts[h]})
		}
	}
	entries = foldCovered(entries)
	slices.SortFunc(entries, func(a, b suggestion) int { return strings.Compare(sortKey(a.domain), sortKey(b.domain)) })

	var b strings.Builder
	fmt.Fprintf(&b, "# gateway allowlist suggest: %d decision lines, %d would-deny, %d denied by the allowlist, %d hosts\n",
		t.decisions, t.wouldDeny, t.denied, len(t.hosts))
	if len(entries) == 0 {
		b.WriteString("# nothing was denied by the allowlist: nothing to add\n")
		return b.String()
	}
	b.WriteString("network:\n  allowlist:\n")
	for _, e := range entries {
		fmt.Fprintf(&b, "    - domain: %q  # %s\n", e.domain, e.comment())
	}
	return b.String()
}

func (s suggestion) comment() string {
	req := plural(s.requests, "request")
	if len(s.names) == 1 && !strings.HasPrefix(s.domain, "*.") {
		return req
	}
	return fmt.Sprintf("%d names, %s: %s", len(s.names), req, strings.Join(s.names, ", "))
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// sortKey orders entries by domain from the top label down, so that a
// domain's names and wildcards sit together.
func sortKey(domain string) string {
	labels := strings.Split(strings.TrimPrefix(domain, "*."), ".")
	slices.Reverse(labels)
	return strings.Join(labels, ".") + "\x00" + domain
}

// wildcardParent is the domain a wildcard over host's siblings would
// name, or "" where none may be written: an IP literal, a name with no
// parent, or a parent that is a public suffix.
func wildcardParent(host string) string {
	if _, ip, err := allowlist.NormalizeHost(host); err != nil || ip.IsValid() {
		return ""
	}
	i := strings.IndexByte(host, '.')
	if i < 0 {
		return ""
	}
	parent := host[i+1:]
	if etld, _ := publicsuffix.PublicSuffix(parent); etld == parent || !strings.Contains(parent, ".") {
		return ""
	}
	return parent
}

// foldCovered moves exact entries that a wildcard already covers (a host
// deeper under its parent) into that wildcard.
func foldCovered(entries []suggestion) []suggestion {
	var out []suggestion
	for _, e := range entries {
		if !strings.HasPrefix(e.domain, "*.") {
			continue
		}
		out = append(out, e)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.domain, "*.") {
			continue
		}
		covered := false
		for i := range out {
			if strings.HasSuffix(e.domain, out[i].domain[1:]) {
				out[i].names = append(out[i].names, e.names...)
				slices.Sort(out[i].names)
				out[i].requests += e.requests
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, e)
		}
	}
	return out
}
