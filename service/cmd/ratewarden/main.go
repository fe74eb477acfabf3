// Command ratewarden runs the ratewarden rate limit service and talks to it.
//
//	ratewarden serve [flags]                 run the HTTP API and Envoy's gRPC rate limit service
//	ratewarden check [flags] KEY             ask a running server for a decision
//	ratewarden config validate PATH...       check config files; print every problem
//	ratewarden demo [flags]                  see why a limit must be shared across replicas
//
// Every serve flag has an environment variable (RATEWARDEN_HTTP_ADDR, ...);
// a flag given on the command line wins. See docs/service.md.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage:
  ratewarden serve [flags]              run the service (HTTP :8080, gRPC :8081)
  ratewarden check [flags] KEY          ask a running server for a decision
  ratewarden config validate PATH...    validate config files or directories
  ratewarden demo [flags]               local vs shared limits behind a load balancer, on loopback

Run "ratewarden <command> -h" for the flags of a command.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr, getenv)
	case "check":
		return check(ctx, args[1:], stdout, stderr, getenv)
	case "config":
		if len(args) < 2 || args[1] != "validate" {
			fmt.Fprint(stderr, "usage: ratewarden config validate PATH...\n")
			return 2
		}
		return validate(args[2:], stdout, stderr)
	case "demo":
		return demoCmd(ctx, args[1:], stdout, stderr, stderrIsTerminal())
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "ratewarden: unknown command %q\n\n%s", args[0], usage)
	return 2
}
