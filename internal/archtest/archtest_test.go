package archtest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// mod is the library's module path; the service and the benchmarks are the
// modules mod/service and mod/bench, and each framework adapter a module
// mod/adapters/<name>.
const mod = "github.com/ratewarden/ratewarden"

// modules are the directories of the project's modules.
var modules = []string{".", "service", "bench", "adapters/ginlimit", "adapters/echolimit", "adapters/fiberlimit", "adapters/grpclimit",
	"service/internal/peerdiff", "service/internal/peerdiff/barerls"}

// The project's packages by role, as docs/architecture.md draws them. A
// group names packages by their path in the project ("." is the root
// package); a name covers the package and the packages below it.
var (
	stores     = []string{"memstore", "redisstore"}
	decorators = []string{"denycache", "fallback", "lease"}
	assembly   = []string{"stack"} // the recommended stack, assembled in one place
	edges      = []string{"httplimit", "service", "adapters"}
	outside    = []string{"service", "bench", "adapters"} // the other modules
	// adapters are edges of their own modules: they may import these of
	// the project (non-test files), and nothing imports them.
	adapters       = []string{"adapters"}
	adapterImports = concat([]string{".", "httplimit"}, stores)
)

// mustExist are the packages the rules lean on: if one is missing, a rule
// about it would hold vacuously, so the table needs updating.
var mustExist = []string{".", "internal/algo", "internal/nilcheck", "memstore", "redisstore",
	"denycache", "fallback", "lease", "stack", "httplimit", "service/server",
	"adapters/ginlimit", "adapters/echolimit", "adapters/fiberlimit", "adapters/grpclimit"}

// pkg is the part of `go list -json` the rules read.
type pkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	CgoFiles   []string
	Imports    []string // of the non-test files
	ImportMap  map[string]string
	Export     string
	Module     *struct{ Path string }
	Error      *struct{ Err string }
}

// name is p's path in the project: "." for the root package, "memstore",
// "service/server"; "" for a package outside the project.
func name(importPath string) string {
	if importPath == mod {
		return "."
	}
	if rest, ok := strings.CutPrefix(importPath, mod+"/"); ok {
		return rest
	}
	return ""
}

// show is n as messages name it.
func show(n string) string {
	if n == "." {
		return "ratewarden (the root package)"
	}
	return n
}

// in reports whether the project package n is one of group or below one.
func in(n string, group []string) bool {
	for _, g := range group {
		if n == g || (g != "." && strings.HasPrefix(n, g+"/")) {
			return true
		}
	}
	return false
}

// project is every package of the project's modules, by name.
type project struct {
	root string // the library module's directory
	pkgs map[string]*pkg
}

var loadProject = sync.OnceValues(func() (*project, error) {
	out, err := goCmd(".", "env", "GOMOD")
	if err != nil {
		return nil, err
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return nil, errors.New("go env GOMOD: not inside a module")
	}
	p := &project{root: filepath.Dir(gomod), pkgs: map[string]*pkg{}}
	for _, dir := range modules {
		list, err := goList(filepath.Join(p.root, dir), "./...")
		if err != nil {
			return nil, err
		}
		for _, lp := range list {
			if n := name(lp.ImportPath); n != "" {
				p.pkgs[n] = lp
			}
		}
	}
	return p, nil
})

func load(t *testing.T) *project {
	t.Helper()
	p, err := loadProject()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// goCmd runs the go command in dir and returns its standard output.
func goCmd(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s (in %s): %v: %s", strings.Join(args, " "), dir, err, stderr.Bytes())
	}
	return out, nil
}

// goList runs `go list -e -json` with args in dir. With -e a package that
// does not build is still listed, with its imports.
func goList(dir string, args ...string) ([]*pkg, error) {
	out, err := goCmd(dir, append([]string{"list", "-e", "-json"}, args...)...)
	if err != nil {
		return nil, err
	}
	var list []*pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(pkg)
		if err := dec.Decode(p); err == io.EOF {
			return list, nil
		} else if err != nil {
			return nil, fmt.Errorf("go list in %s: %w", dir, err)
		}
		list = append(list, p)
	}
}

// projectImports returns the project packages n imports directly.
func (p *project) projectImports(n string) []string {
	var out []string
	for _, imp := range p.pkgs[n].Imports {
		if in := name(imp); in != "" {
			out = append(out, in)
		}
	}
	return out
}

// reach returns every project package n imports, directly or not, each
// with the chain of imports that leads there from n.
func (p *project) reach(n string) map[string][]string {
	seen := map[string][]string{}
	var walk func(from string, chain []string)
	walk = func(from string, chain []string) {
		if p.pkgs[from] == nil {
			return
		}
		for _, imp := range p.projectImports(from) {
			if _, ok := seen[imp]; ok {
				continue
			}
			c := append(slices.Clip(chain), imp)
			seen[imp] = c
			walk(imp, c)
		}
	}
	walk(n, []string{n})
	return seen
}

// members returns the packages of the project that are in group.
func (p *project) members(group []string) []string {
	var out []string
	for n := range p.pkgs {
		if in(n, group) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

func TestPackagesTheRulesNeedExist(t *testing.T) {
	p := load(t)
	for _, n := range mustExist {
		if p.pkgs[n] == nil {
			t.Errorf("no package %s in the project: the rules about it would hold vacuously; update internal/archtest", show(n))
		}
	}
	for _, g := range [][]string{stores, decorators, assembly, edges} {
		for _, n := range g {
			if len(p.members([]string{n})) == 0 {
				t.Logf("no package %s (yet): the rules about it hold vacuously", n)
			}
		}
	}
}

// TestOnlyImports: the root package imports only internal/nilcheck of the
// project, and internal/algo only the root.
func TestOnlyImports(t *testing.T) {
	p := load(t)
	for _, r := range []struct {
		pkg     string
		allowed []string
	}{
		{".", []string{"internal/nilcheck"}},
		{"internal/algo", []string{"."}},
	} {
		if p.pkgs[r.pkg] == nil {
			continue
		}
		for _, imp := range p.projectImports(r.pkg) {
			if !slices.Contains(r.allowed, imp) {
				t.Errorf("%s imports %s; of the project it may import only %s (docs/architecture.md)", show(r.pkg), show(imp), strings.Join(mapped(r.allowed, show), ", "))
			}
		}
	}
}

// TestArrowsPointOneWay: root <- internal/algo <- stores <- decorators <-
// the stack assembly <- edges. No package of a group imports, directly or
// through others, a package of a group further out, and the library
// imports neither of the other two modules.
func TestArrowsPointOneWay(t *testing.T) {
	p := load(t)
	library := func(n string) bool { return !in(n, outside) }
	var libraryPkgs []string
	for n := range p.pkgs {
		if library(n) {
			libraryPkgs = append(libraryPkgs, n)
		}
	}
	sort.Strings(libraryPkgs)
	for _, r := range []struct {
		what string
		from []string
		not  []string
	}{
		{"a store imports no decorator, no stack assembly and no edge", p.members(stores), concat(decorators, assembly, edges)},
		{"a decorator imports no stack assembly and no edge", p.members(decorators), concat(assembly, edges)},
		{"the stack assembly imports no edge", p.members(assembly), edges},
		{"the library imports neither the service, the benchmarks nor an adapter", libraryPkgs, outside},
	} {
		for _, from := range r.from {
			reached := p.reach(from)
			for _, to := range sortedKeys(reached) {
				if in(to, r.not) {
					t.Errorf("%s imports %s (%s): %s (docs/architecture.md)", show(from), show(to), strings.Join(reached[to], " -> "), r.what)
				}
			}
		}
	}
}

// TestAdaptersAreEdges: a framework adapter (adapters/<name>, a module
// each) imports of the project only the root, httplimit and the stores,
// and no package of the project imports an adapter, so no user of the
// library or of another adapter inherits a framework.
func TestAdaptersAreEdges(t *testing.T) {
	p := load(t)
	members := p.members(adapters)
	for _, n := range members {
		for _, imp := range p.projectImports(n) {
			if !in(imp, adapterImports) {
				t.Errorf("%s imports %s; an adapter may import only %s (docs/architecture.md)", n, show(imp), strings.Join(mapped(adapterImports, show), ", "))
			}
		}
	}
	for _, from := range sortedKeys(p.pkgs) {
		for _, imp := range p.projectImports(from) {
			if in(imp, adapters) && !in(from, adapters) {
				t.Errorf("%s imports %s: nothing imports an adapter (docs/architecture.md)", show(from), imp)
			}
			if in(imp, adapters) && in(from, adapters) && strings.SplitN(from, "/", 3)[1] != strings.SplitN(imp, "/", 3)[1] {
				t.Errorf("%s imports %s: an adapter imports no other adapter", from, imp)
			}
		}
	}
}

// TestServerImportsNoStore: the service's server packages (service/server
// and the packages below it) decide through a *ratewarden.Limiter; which
// store stands behind it is the wiring's business
// (service/internal/backend), not the server's.
func TestServerImportsNoStore(t *testing.T) {
	p := load(t)
	for _, n := range p.members([]string{"service/server"}) {
		for _, imp := range p.projectImports(n) {
			if in(imp, stores) {
				t.Errorf("%s imports %s: the server decides through *ratewarden.Limiter and builds no store (docs/architecture.md)", n, imp)
			}
		}
	}
}

// TestOneURLGrammar: no non-test file of the service calls
// rueidis.ParseURL; every Redis URL goes through redisstore.ParseURL.
func TestOneURLGrammar(t *testing.T) {
	p := load(t)
	for _, n := range p.members([]string{"service"}) {
		lp := p.pkgs[n]
		for _, f := range concat(lp.GoFiles, lp.CgoFiles) {
			path := filepath.Join(lp.Dir, f)
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Errorf("%s: %v", path, err)
				continue
			}
			local := importName(file, "github.com/redis/rueidis")
			if local == "" {
				continue
			}
			ast.Inspect(file, func(node ast.Node) bool {
				sel, ok := node.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "ParseURL" {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == local {
					t.Errorf("%s: uses rueidis.ParseURL; the service reads Redis URLs with redisstore.ParseURL, the one grammar (docs/architecture.md)", rel(p.root, fset.Position(sel.Pos())))
				}
				return true
			})
		}
	}
}

// importName is the name file refers to the package path by, or "" when
// it does not import it (or imports it as _ or .). A local variable that
// shadows the name would be taken for the package: the service has none.
func importName(file *ast.File, path string) string {
	for _, s := range file.Imports {
		if strings.Trim(s.Path.Value, `"`) != path {
			continue
		}
		if s.Name == nil {
			return filepath.Base(path)
		}
		if s.Name.Name != "_" && s.Name.Name != "." {
			return s.Name.Name
		}
	}
	return ""
}

// TestServerDecidesThroughLimiter: no non-test code of the service's
// server packages (service/server and the packages below it: the HTTP
// API, the Envoy rate limit service, what they share to decide, their
// telemetry) calls Check or Reset on a ratewarden.Store (or takes them
// as method values). Each package is type-checked (go/types, on the
// export data `go list -export` builds), so the rule finds the call
// whatever the variable is named and however the Store is reached: a
// field, a value of a concrete type that implements Store, a struct
// embedding one. (A local interface with a Check method alone would slip
// through; the review would not.)
//
// One call is not a decision: a Store decorator's own Check (or Reset)
// forwarding to the Store it wraps, like the metered store that a
// Limiter decides on. A call inside a method of that name, on a type that
// is itself a Store, is that.
func TestServerDecidesThroughLimiter(t *testing.T) {
	p := load(t)
	members := p.members([]string{"service/server"})
	if len(members) == 0 {
		t.Skip("no service/server package (TestPackagesTheRulesNeedExist reports it)")
	}
	for _, n := range members {
		lp := p.pkgs[n]
		fset := token.NewFileSet()
		tpkg, files, info, err := typeCheck(filepath.Join(p.root, "service"), lp, fset)
		if err != nil {
			t.Fatalf("type-check %s: %v", lp.ImportPath, err)
		}
		var store *types.Named
		for _, imp := range tpkg.Imports() {
			if imp.Path() == mod {
				if obj, ok := imp.Scope().Lookup("Store").(*types.TypeName); ok {
					store, _ = obj.Type().(*types.Named)
				}
			}
		}
		if store == nil {
			continue // the package does not import the root package
		}
		for _, file := range files {
			for _, c := range storeCalls(file, info, store) {
				t.Errorf("%s: %s: the server decides through *ratewarden.Limiter, not Store.Check/Reset (docs/architecture.md)", rel(p.root, fset.Position(c.pos)), c.what)
			}
		}
	}
}

// storeCall is one use of Check or Reset on a Store.
type storeCall struct {
	pos  token.Pos
	what string
}

// storeCalls returns the uses of Check or Reset on a value whose type is
// store or implements it, in file, except those that forward: inside a
// method of the same name on a type that is itself a Store.
func storeCalls(file *ast.File, info *types.Info, store *types.Named) []storeCall {
	iface, _ := store.Underlying().(*types.Interface)
	isStore := func(t types.Type) bool {
		switch {
		case types.Identical(t, store):
			return true
		case iface == nil:
			return false
		case types.Implements(t, iface):
			return true
		}
		_, isPtr := t.Underlying().(*types.Pointer)
		return !isPtr && !types.IsInterface(t) && types.Implements(types.NewPointer(t), iface)
	}
	// forwards reports whether fd is a Store's own method named m.
	forwards := func(fd *ast.FuncDecl, m string) bool {
		if fd == nil || fd.Recv == nil || fd.Name.Name != m {
			return false
		}
		fn, ok := info.Defs[fd.Name].(*types.Func)
		return ok && isStore(fn.Type().(*types.Signature).Recv().Type())
	}
	var out []storeCall
	for _, decl := range file.Decls {
		fd, _ := decl.(*ast.FuncDecl) // nil for declarations of variables and types
		in := ""
		if fd != nil {
			in = " (in " + fd.Name.Name + ")"
		}
		ast.Inspect(decl, func(node ast.Node) bool {
			sel, ok := node.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			s := info.Selections[sel]
			if s == nil || s.Kind() == types.FieldVal {
				return true
			}
			if m := s.Obj().Name(); (m == "Check" || m == "Reset") && isStore(s.Recv()) && !forwards(fd, m) {
				out = append(out, storeCall{sel.Pos(), fmt.Sprintf("%s.%s on %s%s", types.ExprString(sel.X), m, types.TypeString(s.Recv(), nil), in)})
			}
			return true
		})
	}
	return out
}

// typeCheck parses and type-checks lp's non-test files, importing its
// dependencies from the export data that `go list -export` builds (in the
// build cache) in dir, lp's module.
func typeCheck(dir string, lp *pkg, fset *token.FileSet) (*types.Package, []*ast.File, *types.Info, error) {
	deps, err := goList(dir, "-export", "-deps", lp.ImportPath)
	if err != nil {
		return nil, nil, nil, err
	}
	exports := map[string]string{}
	var target *pkg
	for _, d := range deps {
		exports[d.ImportPath] = d.Export
		if d.ImportPath == lp.ImportPath {
			target = d
		}
	}
	if target == nil {
		return nil, nil, nil, fmt.Errorf("go list -deps %s: the package itself is missing", lp.ImportPath)
	}
	var files []*ast.File
	for _, f := range concat(target.GoFiles, target.CgoFiles) {
		file, err := parser.ParseFile(fset, filepath.Join(target.Dir, f), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, nil, nil, err
		}
		files = append(files, file)
	}
	lookup := func(path string) (io.ReadCloser, error) {
		if mapped, ok := target.ImportMap[path]; ok {
			path = mapped
		}
		e := exports[path]
		if e == "" {
			return nil, fmt.Errorf("no export data for %s (does it build?)", path)
		}
		return os.Open(e)
	}
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}, Defs: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", lookup)}
	tpkg, err := conf.Check(lp.ImportPath, fset, files, info)
	if err != nil {
		return nil, nil, nil, err
	}
	return tpkg, files, info, nil
}

// rel is pos with its file named relative to the project root.
func rel(root string, pos token.Position) string {
	if r, err := filepath.Rel(root, pos.Filename); err == nil {
		pos.Filename = r
	}
	return pos.String()
}

func mapped[E, F any](s []E, f func(E) F) []F {
	out := make([]F, len(s))
	for i, e := range s {
		out[i] = f(e)
	}
	return out
}

func concat[S ~[]E, E any](ss ...S) S { return slices.Concat(ss...) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
