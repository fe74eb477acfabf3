// Package childproc runs the test binary again as child processes, each
// given a job, and collects what they report: replicas of a service as
// the separate processes they are in production, each with its own Go
// runtime, clients and breakers, while the parent test injects the
// faults. For tests only.
//
// A test package calls Serve first thing in TestMain; a test calls Run.
package childproc

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// env carries a child's job, as JSON.
const env = "RATEWARDEN_CHILD_JOB"

// Serve returns at once in the test process itself. In a child it runs
// the job with run, prints the report as JSON on stdout and exits: 0 when
// run succeeded, 1 otherwise (the error on stderr). Call it first in
// TestMain.
func Serve(run func(job []byte) (report any, err error)) {
	spec := os.Getenv(env)
	if spec == "" {
		return
	}
	rep, err := run([]byte(spec))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		fmt.Fprintln(os.Stderr, "child: report:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Run starts n children on job (marshalled as JSON), passes their stderr
// to the test log, and returns their reports decoded into R, in order. A
// child that fails, or has not ended within limit, fails the test.
func Run[R any](t *testing.T, n int, job any, limit time.Duration) []*R {
	t.Helper()
	spec, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	reps, errs := make([]*R, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), env+"="+string(spec))
			cmd.Stderr = &lineLog{t: t, prefix: fmt.Sprintf("child %d: ", i)}
			out, err := cmd.Output()
			if err != nil {
				errs[i] = fmt.Errorf("child %d: %w", i, err)
				return
			}
			reps[i] = new(R)
			errs[i] = json.Unmarshal(out, reps[i])
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return reps
}

// lineLog passes a child's stderr to the test log.
type lineLog struct {
	t      *testing.T
	prefix string
	mu     sync.Mutex
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Log(l.prefix + string(p))
	return len(p), nil
}
