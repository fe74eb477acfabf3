package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/server/api"
)

const checkHead = `usage: ratewarden check [flags] KEY

Asks a running ratewarden server for a decision on KEY (taking --cost
units of --policy or --limit) and prints the server's JSON answer.
--peek asks without consuming, --reset resets the key.
`

const checkExits = `  0  allowed (--reset: the key was reset)
  1  error: the server could not be reached, or refused the request
  2  usage error
  3  over the limit
`

func check(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := newFlagSet("check", checkHead, checkExits)
	addr := envFlag(fs, getenv, "server", "RATEWARDEN_SERVER", "http://127.0.0.1:8080", "server base URL")
	token := envFlag(fs, getenv, "api-token", "RATEWARDEN_API_TOKEN", "", "bearer token")
	policy := fs.String("policy", "", "policy name from the server's config")
	limit := fs.String("limit", "", `inline limit, e.g. "100/1m" (instead of --policy; the server must take inline limits, serve --inline-limits)`)
	cost := fs.Int64("cost", 1, "units to take (0 reports the state)")
	peek := fs.Bool("peek", false, "report the decision without consuming")
	reset := fs.Bool("reset", false, "reset the key's state instead of checking")
	timeout := fs.Duration("timeout", 5*time.Second, "request timeout")
	pos, code, done := parseCommand(fs, args, stdout, stderr)
	if done {
		return code
	}
	if len(pos) != 1 {
		return usageError(stderr, "check", "want one KEY, got %s", plural(len(pos), "argument", "arguments"))
	}
	key := pos[0]
	path, body := "/v1/check", any(api.CheckRequest{Key: key, Policy: *policy, Limit: *limit, Cost: cost})
	switch {
	case *reset:
		path, body = "/v1/reset", api.ResetRequest{Key: key, Policy: *policy, Limit: *limit}
	case *peek:
		path = "/v1/peek"
	}
	b, _ := json.Marshal(body) // plain strings and numbers: cannot fail
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(*addr, "/")+path, bytes.NewReader(b))
	if err != nil {
		fmt.Fprintf(stderr, "ratewarden check: %v\n", err)
		return 1
	}
	req.Header.Set("Content-Type", "application/json")
	if *token != "" {
		req.Header.Set("Authorization", "Bearer "+*token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "ratewarden check: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		fmt.Fprintf(stderr, "ratewarden check: reading the answer: %v\n", err)
		return 1
	}
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "ratewarden check: %s: %s", resp.Status, out)
		return 1
	}
	_, _ = stdout.Write(out)
	if *reset {
		return 0
	}
	var d api.Decision
	if err := json.Unmarshal(out, &d); err != nil {
		fmt.Fprintf(stderr, "ratewarden check: decoding the answer: %v\n", err)
		return 1
	}
	if !d.Allowed {
		return exitDenied
	}
	return 0
}

const configHead = `usage: ratewarden config <command> [arguments]

Works with config files of "ratewarden serve --config".

commands:
  validate [flags] PATH...    validate config files or directories
`

// configCmd runs "ratewarden config": today only "config validate".
func configCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("config", configHead, "  0  valid\n  1  invalid, or a file could not be read\n  2  usage error\n")
	if len(args) > 0 && args[0] == "validate" {
		return validate(args[1:], stdout, stderr)
	}
	pos, code, done := parseCommand(fs, args, stdout, stderr)
	switch {
	case done:
		return code
	case len(pos) == 0:
		return usageError(stderr, "config", "want a command: validate")
	}
	return usageError(stderr, "config", "unknown command %q; want validate", pos[0])
}

const validateHead = `usage: ratewarden config validate [flags] PATH...

Reads the config files and directories (every *.yaml and *.yml file in
them) as "ratewarden serve --config" would, and prints every problem with
its file and line, or one line saying what is configured:
  OK: 3 policies, 2 domains in a.yaml, b.yaml
`

func validate(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("config validate", validateHead, "  0  valid\n  1  invalid, or a file could not be read\n  2  usage error\n")
	merge := fs.Bool("merge-domains", false, "merge documents of the same Envoy domain, as serve --merge-domains (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG)")
	paths, code, done := parseCommand(fs, args, stdout, stderr)
	if done {
		return code
	}
	if len(paths) == 0 {
		return usageError(stderr, "config validate", "want at least one PATH")
	}
	cfg, err := config.Loader{MergeDomains: *merge}.Load(paths...)
	if err != nil {
		if ps := config.Problems(err); ps != nil {
			for _, p := range ps {
				fmt.Fprintln(stdout, p)
			}
			fmt.Fprintln(stderr, plural(len(ps), "problem", "problems"))
		} else {
			fmt.Fprintf(stderr, "ratewarden config validate: %v\n", err)
		}
		return exitError
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	fmt.Fprintf(stdout, "OK: %s, %s in %s\n", plural(len(cfg.Policies), "policy", "policies"),
		plural(len(cfg.Domains), "domain", "domains"), strings.Join(cfg.Files, ", "))
	return exitOK
}
