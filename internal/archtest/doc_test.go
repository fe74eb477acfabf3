package archtest_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docPackage is one row of a package table of docs/architecture.md.
type docPackage struct {
	line    int
	imports []string // project packages, in the table's names ("." for the root)
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// docName is a package as the tables name it: the root package is
// "ratewarden", every other its path in the repository.
func docName(n string) string {
	if n == "." {
		return "ratewarden"
	}
	return n
}

// readDocTables returns the rows of every table of docs/architecture.md
// whose first column is headed "package" and whose third is "imports
// (of this project)".
func readDocTables(t *testing.T, root string) map[string]docPackage {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string]docPackage{}
	inTable := false
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if !strings.HasPrefix(text, "|") {
			inTable = false
			continue
		}
		cells := strings.Split(strings.Trim(text, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) == 3 && cells[0] == "package" && cells[2] == "imports (of this project)" {
			inTable = true
			continue
		}
		if !inTable || strings.HasPrefix(cells[0], "---") {
			continue
		}
		if len(cells) != 3 {
			t.Errorf("docs/architecture.md:%d: a package row wants 3 cells, has %d", line, len(cells))
			continue
		}
		m := codeSpan.FindStringSubmatch(cells[0])
		if m == nil {
			t.Errorf("docs/architecture.md:%d: the package is not in backquotes: %q", line, cells[0])
			continue
		}
		var imports []string
		if cells[2] != "none" {
			for _, s := range codeSpan.FindAllStringSubmatch(cells[2], -1) {
				imports = append(imports, s[1])
			}
			if len(imports) == 0 {
				t.Errorf("docs/architecture.md:%d: imports %q: want `package`s or none", line, cells[2])
			}
		}
		if old, dup := rows[m[1]]; dup {
			t.Errorf("docs/architecture.md:%d: %s listed again (first on line %d)", line, m[1], old.line)
		}
		rows[m[1]] = docPackage{line: line, imports: imports}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestArchitectureDocMatchesGoList: docs/architecture.md lists every
// package of every module, and nothing else, each with exactly the
// project packages its non-test files import.
func TestArchitectureDocMatchesGoList(t *testing.T) {
	p := load(t)
	rows := readDocTables(t, p.root)
	if len(rows) == 0 {
		t.Fatal("docs/architecture.md: no package tables found")
	}
	for n := range p.pkgs {
		row, ok := rows[docName(n)]
		if !ok {
			t.Errorf("docs/architecture.md lists no %s (a package of the project)", docName(n))
			continue
		}
		var want []string
		for _, imp := range p.projectImports(n) {
			want = append(want, docName(imp))
		}
		slices.Sort(want)
		got := slices.Sorted(slices.Values(row.imports))
		if !slices.Equal(got, want) {
			t.Errorf("docs/architecture.md:%d: %s imports %v, the table says %v", row.line, docName(n), want, got)
		}
	}
	for n, row := range rows {
		key := n
		if n == "ratewarden" {
			key = "."
		}
		if p.pkgs[key] == nil {
			t.Errorf("docs/architecture.md:%d: %s is no package of the project", row.line, n)
		}
	}
}

// harness are the packages written for tests alone: the shipped binary
// must link none of them.
var harness = []string{"internal/testredis", "internal/childproc", "internal/adaptertest",
	"internal/refmodel", "internal/archtest", "storetest", "redisstore/clustertest"}

// TestBinaryLinksNoHarness: `go list -deps` of the ratewarden binary names
// no test harness package of the project, and not the testing package.
func TestBinaryLinksNoHarness(t *testing.T) {
	p := load(t)
	deps, err := goCmd(filepath.Join(p.root, "service"), "list", "-deps", "./cmd/ratewarden")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range strings.Fields(string(deps)) {
		if d == "testing" || in(name(d), harness) {
			t.Errorf("the ratewarden binary links %s, a package for tests", d)
		}
	}
}
