// Package childproc runs the test binary again as child processes, each
// given a job, and collects what they report: replicas of a service as
// the separate processes they are in production, each with its own Go
// runtime, clients and breakers, while the parent test injects the
// faults. For tests only.
//
// A test package calls Serve first thing in TestMain; a test calls Run,
// or Start for a child it kills.
package childproc

import (
	"bufio"
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
			cmd := command(ctx, spec)
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

// command is the test binary run again as a child on spec, running no
// test.
func command(ctx context.Context, spec []byte) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+string(spec))
	return cmd
}

// readyLine is what Ready prints.
const readyLine = "childproc: ready"

// Ready tells the parent that started this child with Start that the job
// has got where the parent waits for it (it holds what it is to be killed
// holding, say). A job calls it once, from the child.
func Ready() { fmt.Println(readyLine) }

// Proc is a child started by Start. It runs until its job ends or Kill.
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the child has ended
}

// Start starts one child on job (marshalled as JSON), passes its stderr to
// the test log, and returns once the job has called Ready. A child that
// ends first, or has not called Ready within limit, fails the test; one
// still running when the test ends is killed.
func Start(t *testing.T, job any, limit time.Duration) *Proc {
	t.Helper()
	spec, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	cmd := command(context.Background(), spec)
	cmd.Stderr = &lineLog{t: t, prefix: "child: "}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	ready := make(chan bool, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		ready <- sc.Scan() && sc.Text() == readyLine
		for sc.Scan() { // drain until the child ends
		}
		_ = cmd.Wait()
	}()
	select {
	case ok := <-ready:
		if !ok {
			<-p.done
			t.Fatalf("childproc: the child ended before it was ready (%v; its stderr is in the log)", cmd.ProcessState)
		}
	case <-time.After(limit):
		t.Fatalf("childproc: the child was not ready within %v (its stderr is in the log)", limit)
	}
	return p
}

// Kill SIGKILLs p, a crash as the child sees it: no deferred call runs
// and its connections are not closed cleanly. It returns once the child
// has ended, with the instant it sent the signal.
func (p *Proc) Kill(t *testing.T) time.Time {
	t.Helper()
	at := time.Now()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done
	return at
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
