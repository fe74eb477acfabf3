// Command ratewarden runs the ratewarden rate limit service and talks to it.
//
//	ratewarden serve [flags]                 run the HTTP API and Envoy's gRPC rate limit service
//	ratewarden check [flags] KEY             ask a running server for a decision
//	ratewarden config validate PATH...       check config files; print every problem
//	ratewarden demo [flags]                  see why a limit must be shared across replicas
//	ratewarden version                       print the version and how it was built
//
// Flags may come before or after the arguments; "--" ends the flags.
// Every serve flag has an environment variable (RATEWARDEN_HTTP_ADDR, ...);
// a flag given on the command line wins. See docs/service.md.
//
// Requested help (-h, --help) goes to stdout with exit status 0; a usage
// error goes to stderr with exit status 2. Each command's usage lists the
// exit statuses it returns.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Exit statuses. check adds exitDenied.
const (
	exitOK     = 0
	exitError  = 1
	exitUsage  = 2
	exitDenied = 3
)

const usage = `usage: ratewarden <command> [flags] [arguments]

commands:
  serve [flags]              run the service (HTTP :8080, gRPC :8081)
  check [flags] KEY          ask a running server for a decision
  config validate PATH...    validate config files or directories
  demo [flags]               local vs shared limits behind a load balancer, on loopback
  version                    print the version, VCS revision and Go version

Run "ratewarden <command> -h" for the flags of a command. Flags may come
before or after the arguments; "--" ends the flags.
"ratewarden -h" prints this help, "ratewarden --version" the version.

exit status:
  0  success (check: allowed)
  1  error
  2  usage error
  3  check: over the limit
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// run is main without the process: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr, getenv)
	case "check":
		return check(ctx, args[1:], stdout, stderr, getenv)
	case "config":
		return configCmd(args[1:], stdout, stderr)
	case "demo":
		return demoCmd(ctx, args[1:], stdout, stderr, stderrIsTerminal())
	case "version", "-version", "--version":
		return versionCmd(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "ratewarden: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}

// newFlagSet makes the flag set of a command. Its usage is head (the
// synopsis and what the command does), the flags, if any, then exits
// (the exit statuses, one a line).
func newFlagSet(name, head, exits string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprint(w, head)
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprint(w, "\nflags:\n")
			fs.PrintDefaults()
		}
		fmt.Fprint(w, "\nexit status:\n"+exits)
	}
	return fs
}

// parseCommand parses a command's arguments with parseArgs. When it
// returns done, the caller returns code: exitOK after printing the usage
// to stdout for -h, -help or --help; exitUsage after printing the problem
// to stderr.
func parseCommand(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (pos []string, code int, done bool) {
	fs.SetOutput(io.Discard) // the flag package's own messages; ours follow
	pos, err := parseArgs(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return nil, exitOK, true
	case err != nil:
		return nil, usageError(stderr, fs.Name(), "%v", err), true
	}
	return pos, exitOK, false
}

// usageError prints "ratewarden CMD: problem" and where to find the usage
// to w, and returns exitUsage.
func usageError(w io.Writer, cmd, format string, a ...any) int {
	fmt.Fprintf(w, "ratewarden %s: %s\nRun \"ratewarden %s -h\" for usage.\n", cmd, fmt.Sprintf(format, a...), cmd)
	return exitUsage
}

// parseArgs parses args with fs, flags and positional arguments in any
// order: "check KEY --policy api" is "check --policy api KEY". A flag
// that takes a value takes the next argument unless it is written
// -name=value. "--" ends the flags: everything after it is positional,
// and so is "-" alone. It returns the positional arguments in order.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			pos = append(pos, args[i+1:]...)
			i = len(args)
		case len(a) < 2 || a[0] != '-':
			pos = append(pos, a)
		default:
			flags = append(flags, a)
			if takesValue(fs, a) && i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
		}
	}
	if err := fs.Parse(flags); err != nil {
		return nil, err
	}
	return pos, nil
}

// takesValue reports whether the flag argument a (-name or --name) names
// a defined non-boolean flag without an "=value" of its own.
func takesValue(fs *flag.FlagSet, a string) bool {
	name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
	if strings.Contains(name, "=") {
		return false
	}
	f := fs.Lookup(name)
	if f == nil {
		return false // the flag package reports it
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

// plural is "1 policy" or "3 policies": n with the word for its number.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
