package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/server"
)

// Exit codes of check: 0 allowed, 1 error, 2 usage, 3 over the limit.
const exitDenied = 3

func check(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: ratewarden check [flags] KEY\n\nAsks a running server; exit 0 allowed, 3 over the limit, 1 error.\n\n")
		fs.PrintDefaults()
	}
	addr := envFlag(fs, getenv, "server", "RATEWARDEN_SERVER", "http://127.0.0.1:8080", "server base URL")
	token := envFlag(fs, getenv, "api-token", "RATEWARDEN_API_TOKEN", "", "bearer token")
	policy := fs.String("policy", "", "policy name from the server's config")
	limit := fs.String("limit", "", `inline limit, e.g. "100/1m" (instead of --policy)`)
	cost := fs.Int64("cost", 1, "units to take (0 reports the state)")
	peek := fs.Bool("peek", false, "report the decision without consuming")
	reset := fs.Bool("reset", false, "reset the key's state instead of checking")
	timeout := fs.Duration("timeout", 5*time.Second, "request timeout")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	key := fs.Arg(0)
	path, body := "/v1/check", any(server.CheckRequest{Key: key, Policy: *policy, Limit: *limit, Cost: cost})
	switch {
	case *reset:
		path, body = "/v1/reset", server.ResetRequest{Key: key, Policy: *policy, Limit: *limit}
	case *peek:
		path = "/v1/peek"
	}
	b, _ := json.Marshal(body) // plain strings and numbers: cannot fail
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(*addr, "/")+path, bytes.NewReader(b))
	if err != nil {
		fmt.Fprintf(stderr, "check: %v\n", err)
		return 1
	}
	req.Header.Set("Content-Type", "application/json")
	if *token != "" {
		req.Header.Set("Authorization", "Bearer "+*token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "check: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		fmt.Fprintf(stderr, "check: reading the answer: %v\n", err)
		return 1
	}
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "check: %s: %s", resp.Status, out)
		return 1
	}
	_, _ = stdout.Write(out)
	if *reset {
		return 0
	}
	var d server.Decision
	if err := json.Unmarshal(out, &d); err != nil {
		fmt.Fprintf(stderr, "check: decoding the answer: %v\n", err)
		return 1
	}
	if !d.Allowed {
		return exitDenied
	}
	return 0
}

func validate(paths []string, stdout, stderr io.Writer) int {
	if len(paths) == 0 {
		fmt.Fprint(stderr, "usage: ratewarden config validate PATH...\n")
		return 2
	}
	cfg, err := config.Load(paths...)
	if err != nil {
		if ps := config.Problems(err); ps != nil {
			for _, p := range ps {
				fmt.Fprintln(stdout, p)
			}
			fmt.Fprintf(stderr, "%d problem(s)\n", len(ps))
		} else {
			fmt.Fprintln(stderr, err)
		}
		return 1
	}
	fmt.Fprintf(stdout, "OK: %d policies, %d domains in %s\n", len(cfg.Policies), len(cfg.Domains), strings.Join(cfg.Files, ", "))
	return 0
}
