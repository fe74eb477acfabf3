package doccheck

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// A block is one marked fenced block of a document.
type block struct {
	file string // path from the repository root, e.g. "docs/service.md"
	line int    // line of the opening fence (1-based)
	kind string // "run", "start", "config" or "skip"
	lang string // the fence's info string: "sh", "go", "yaml", ...
	body string

	hasOut  bool   // an output block follows
	out     string // the shown output
	outLine int    // line of the output block's fence
	exit    int    // the exit status the output marker asks for (default 0)
	reason  string // why a block is skipped
}

func (b *block) where() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// unmarked is a shell or Go block without a marker.
type unmarked struct {
	line int
	lang string
}

var (
	markerRE = regexp.MustCompile(`^<!--\s*doccheck:\s*([a-z]+)\b\s*(.*?)\s*-->\s*$`)
	fenceRE  = regexp.MustCompile("^( {0,3})(```+|~~~+)\\s*([^`\\s]*)")
)

// isShell and isGo name the fence languages the test runs.
func isShell(lang string) bool { return lang == "sh" || lang == "bash" || lang == "shell" }
func isGo(lang string) bool    { return lang == "go" }

// parse returns the marked blocks of a document and the shell and Go
// blocks that carry no marker. A marker must be followed (blank lines
// aside) by a fenced block; an output marker must follow a run block
// directly (no other fence between them).
func parse(file, text string) ([]*block, []unmarked, error) {
	lines := strings.Split(text, "\n")
	var (
		blocks  []*block
		loose   []unmarked
		pending []string // the marker's directive and arguments
		pline   int
		prevRun *block // the run block just before, for an output marker
	)
	for i := 0; i < len(lines); i++ {
		line := strings.TrimRight(lines[i], " \t\r")
		if f := fenceRE.FindStringSubmatch(line); f != nil {
			indent, fence, lang := len(f[1]), f[2], f[3]
			end := -1
			for j := i + 1; j < len(lines); j++ {
				t := strings.TrimSpace(lines[j])
				if strings.HasPrefix(t, fence[:1]) && strings.Trim(t, fence[:1]) == "" && len(t) >= len(fence) {
					end = j
					break
				}
			}
			if end < 0 {
				return nil, nil, fmt.Errorf("%s:%d: fenced block is never closed", file, i+1)
			}
			var body []string
			for _, l := range lines[i+1 : end] {
				l = strings.TrimRight(l, "\r")
				for k := 0; k < indent && strings.HasPrefix(l, " "); k++ {
					l = l[1:]
				}
				body = append(body, l)
			}
			b := &block{file: file, line: i + 1, lang: lang, body: strings.Join(body, "\n") + "\n"}
			i = end
			if pending == nil {
				if isShell(lang) || isGo(lang) {
					loose = append(loose, unmarked{line: b.line, lang: lang})
				}
				prevRun = nil
				continue
			}
			dir, args := pending[0], pending[1]
			pending = nil
			switch dir {
			case "run":
				if !isShell(lang) && !isGo(lang) {
					return nil, nil, fmt.Errorf("%s:%d: a run block must be sh or go, not %q", file, b.line, lang)
				}
			case "start":
				if !isShell(lang) {
					return nil, nil, fmt.Errorf("%s:%d: a start block must be sh, not %q", file, b.line, lang)
				}
			case "config":
				if lang != "yaml" {
					return nil, nil, fmt.Errorf("%s:%d: a config block must be yaml, not %q", file, b.line, lang)
				}
			case "skip":
				if args == "" {
					return nil, nil, fmt.Errorf("%s:%d: a skip marker needs a reason", file, pline)
				}
				b.reason = args
			case "output":
				if prevRun == nil {
					return nil, nil, fmt.Errorf("%s:%d: an output block must directly follow a run block", file, b.line)
				}
				prevRun.hasOut, prevRun.out, prevRun.outLine = true, b.body, b.line
				for _, a := range strings.Fields(args) {
					v, ok := strings.CutPrefix(a, "exit=")
					n, err := strconv.Atoi(v)
					if !ok || err != nil {
						return nil, nil, fmt.Errorf("%s:%d: output marker: unknown argument %q (want exit=N)", file, pline, a)
					}
					prevRun.exit = n
				}
				prevRun = nil
				continue
			default:
				return nil, nil, fmt.Errorf("%s:%d: unknown doccheck marker %q (want run, start, output, config or skip)", file, pline, dir)
			}
			if dir != "skip" && args != "" {
				return nil, nil, fmt.Errorf("%s:%d: the %s marker takes no arguments, got %q", file, pline, dir, args)
			}
			b.kind = dir
			blocks = append(blocks, b)
			prevRun = nil
			if dir == "run" {
				prevRun = b
			}
			continue
		}
		if m := markerRE.FindStringSubmatch(line); m != nil {
			if pending != nil {
				return nil, nil, fmt.Errorf("%s:%d: marker follows the marker at line %d without a fenced block between", file, i+1, pline)
			}
			pending, pline = []string{m[1], m[2]}, i+1
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(line), "<!-- doccheck") {
			return nil, nil, fmt.Errorf("%s:%d: malformed doccheck marker %q", file, i+1, line)
		}
		if pending != nil && strings.TrimSpace(line) != "" {
			return nil, nil, fmt.Errorf("%s:%d: the marker is not followed by a fenced block", file, pline)
		}
	}
	if pending != nil {
		return nil, nil, fmt.Errorf("%s:%d: the marker is not followed by a fenced block", file, pline)
	}
	return blocks, loose, nil
}

// placeholders stand, in a shown output, for values that differ from run
// to run. Spaces right before a placeholder match any run of spaces, so
// a right-aligned column may hold numbers of any width.
var placeholders = map[string]string{
	"<n>":       `[0-9]+`,
	"<decimal>": `[0-9]+(?:\.[0-9]+)?`,
	"<port>":    `[0-9]{1,5}`,
	"<date>":    `[A-Z][a-z]{2}, [0-9]{2} [A-Z][a-z]{2} [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT`,
}

var placeholderRE = regexp.MustCompile(` *(<n>|<decimal>|<port>|<date>)`)

// lineRE turns one line of shown output into an anchored expression.
func lineRE(want string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	last := 0
	for _, m := range placeholderRE.FindAllStringSubmatchIndex(want, -1) {
		b.WriteString(regexp.QuoteMeta(want[last:m[0]]))
		if m[2] > m[0] {
			b.WriteString(" +")
		}
		b.WriteString(placeholders[want[m[2]:m[3]]])
		last = m[1]
	}
	b.WriteString(regexp.QuoteMeta(want[last:]))
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// normalize drops carriage returns, trailing spaces and trailing blank
// lines, and splits into lines.
func normalize(s string) []string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t\r")
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// match compares an output with a shown one, line by line; every line
// must match in full (placeholders aside).
func match(want, got string) error {
	w, g := normalize(want), normalize(got)
	for i := range max(len(w), len(g)) {
		switch {
		case i >= len(w):
			return fmt.Errorf("output line %d is not shown: %q", i+1, g[i])
		case i >= len(g):
			return fmt.Errorf("shown line %d is missing from the output: %q", i+1, w[i])
		case !lineRE(w[i]).MatchString(g[i]):
			return fmt.Errorf("line %d differs:\n  shown: %q\n  got:   %q", i+1, w[i], g[i])
		}
	}
	return nil
}

func TestParse(t *testing.T) {
	doc := strings.Join([]string{
		"# Title",
		"<!-- doccheck: run -->",
		"```sh",
		"echo hi",
		"```",
		"",
		"<!-- doccheck: output exit=3 -->",
		"```",
		"hi",
		"```",
		"```go",
		"package main",
		"```",
		"<!-- doccheck: skip needs Envoy -->",
		"```sh",
		"envoy -c x",
		"```",
	}, "\n")
	blocks, loose, err := parse("x.md", doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 || blocks[0].kind != "run" || blocks[0].body != "echo hi\n" || !blocks[0].hasOut ||
		blocks[0].out != "hi\n" || blocks[0].exit != 3 || blocks[0].line != 3 {
		t.Errorf("run block: %+v", blocks[0])
	}
	if blocks[1].kind != "skip" || blocks[1].reason != "needs Envoy" {
		t.Errorf("skip block: %+v", blocks[1])
	}
	if len(loose) != 1 || loose[0].line != 11 || loose[0].lang != "go" {
		t.Errorf("unmarked: %+v", loose)
	}

	for _, bad := range []string{
		"<!-- doccheck: run -->\ntext\n```sh\nx\n```",                                             // not followed by a fence
		"<!-- doccheck: output -->\n```\nx\n```",                                                  // output without a run block
		"<!-- doccheck: run -->\n```sh\nx\n```\n```\n```\n<!-- doccheck: output -->\n```\nx\n```", // a fence between
		"<!-- doccheck: bogus -->\n```sh\nx\n```",                                                 // unknown marker
		"<!-- doccheck: skip -->\n```sh\nx\n```",                                                  // skip without a reason
		"<!-- doccheck: run -->\n```yaml\nx: 1\n```",                                              // wrong language
		"<!-- doccheck: run -->\n```sh\nx\n",                                                      // never closed
		"<!-- doccheck: run -->\n```sh\nx\n```\n<!-- doccheck: output exit=x -->\n```\n```",       // bad argument
		"<!-- doccheck run -->\n```sh\nx\n```",                                                    // malformed
	} {
		if _, _, err := parse("bad.md", bad); err == nil {
			t.Errorf("parse accepted:\n%s", bad)
		}
	}
}

func TestDiscard(t *testing.T) {
	for _, c := range []struct {
		src  string
		want bool
	}{
		{"\tstore, _ := redisstore.New(client)", true},
		{"\t_ = f()", true},
		{"\t_, err := f()", true},
		{"\tstore, err := redisstore.New(client)", false},
		{"\tfor _, x := range xs {", false},
		{"\tif x == y {", false},
	} {
		if got := discardRE.MatchString(c.src); got != c.want {
			t.Errorf("discardRE on %q = %v, want %v", c.src, got, c.want)
		}
	}
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		want, got string
		ok        bool
	}{
		{"a\nb\n", "a\r\nb  \n\n", true},
		{"Date: <date>", "Date: Tue, 01 Dec 2026 18:05:45 GMT", true},
		{`{"reset_after_ms":<n>}`, `{"reset_after_ms":74142}`, true},
		{`{"reset_after_ms":<n>}`, `{"reset_after_ms":-1}`, false},
		{`"durationUntilReset": "<decimal>s"`, `"durationUntilReset": "37.123456s"`, true},
		{"shared     <n>  100", "shared      7  100", true},
		{"shared     <n>  100", "shared    100  100", true},
		{"shared     <n>  100", "shared 33 100", false},
		{"a.b", "axb", false},
		{"a", "a\nb", false},
		{"a\nb", "a", false},
	} {
		if err := match(c.want, c.got); (err == nil) != c.ok {
			t.Errorf("match(%q, %q) = %v, want ok=%v", c.want, c.got, err, c.ok)
		}
	}
}
