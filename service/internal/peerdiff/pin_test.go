//go:build linux

package peerdiff

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// pinning says where TestLoadRatio's processes run: every service under
// test (ratewarden, envoyproxy/ratelimit, barerls) on svc, the load (this
// process's callers) on load, so a service competes with nothing of the
// harness for its CPUs, and the redis-servers on redis, one of the two.
// The zero value pins nothing.
type pinning struct {
	on               bool
	svc, load, redis unix.CPUSet
	redisWhere       string // "load" or "service"
}

// planPinning reads PEERDIFF_LOAD_PIN ("1" pins, "0" does not; unset pins
// when this process may run on two CPUs or more),
// PEERDIFF_LOAD_SVC_CPUS (default 1), the number of CPUs the services
// get: the last ones this process may run on; the load gets the rest,
// and PEERDIFF_LOAD_REDIS_ON, where the redis-servers run: "load" (the
// default) or "service".
func planPinning(t *testing.T) pinning {
	t.Helper()
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatalf("sched_getaffinity: %v", err)
	}
	cpus := cpuList(all)
	switch v := os.Getenv("PEERDIFF_LOAD_PIN"); v {
	case "0":
		return pinning{}
	case "":
		if len(cpus) < 2 {
			return pinning{}
		}
	case "1":
	default:
		t.Fatalf("PEERDIFF_LOAD_PIN=%q: want 0 or 1", v)
	}
	n := envInt(t, "PEERDIFF_LOAD_SVC_CPUS", 1)
	if len(cpus) <= n {
		t.Fatalf("pinning: %d CPUs for the services leaves none of %v for the load", n, cpus)
	}
	p := pinning{on: true}
	for i, c := range cpus {
		if i >= len(cpus)-n {
			p.svc.Set(c)
		} else {
			p.load.Set(c)
		}
	}
	switch p.redisWhere = os.Getenv("PEERDIFF_LOAD_REDIS_ON"); p.redisWhere {
	case "", "load":
		p.redis, p.redisWhere = p.load, "load"
	case "service":
		p.redis = p.svc
	default:
		t.Fatalf("PEERDIFF_LOAD_REDIS_ON=%q: want load or service", p.redisWhere)
	}
	return p
}

// String says what runs where.
func (p pinning) String() string {
	if !p.on {
		return "not pinned: services, callers and redis-servers share every CPU; each Go process has the default GOMAXPROCS"
	}
	return fmt.Sprintf("pinned: the services on CPU %s (GOMAXPROCS=%d), the callers (this process, GOMAXPROCS=%d) on CPU %s, the redis-servers on CPU %s (the %s's)",
		listString(p.svc), p.svc.Count(), p.load.Count(), listString(p.load), listString(p.redis), p.redisWhere)
}

// env is what a Go service's environment gets: GOMAXPROCS matching its
// CPUs. (A Go process reads its affinity when it starts, so this is what
// it would choose; it is set so that every Go service surely runs alike.)
func (p pinning) env() []string {
	if !p.on {
		return nil
	}
	return []string{"GOMAXPROCS=" + strconv.Itoa(p.svc.Count())}
}

// pinSelf moves every thread of this process to the load's CPUs and sets
// GOMAXPROCS to their number, and returns what undoes both. Threads
// started later inherit the mask of the thread that starts them.
func (p pinning) pinSelf(t *testing.T) (undo func()) {
	t.Helper()
	if !p.on {
		return func() {}
	}
	var was unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		t.Fatalf("sched_getaffinity: %v", err)
	}
	procs := runtime.GOMAXPROCS(p.load.Count())
	if err := pinTasks(os.Getpid(), p.load); err != nil {
		t.Fatalf("pinning this process: %v", err)
	}
	return func() {
		runtime.GOMAXPROCS(procs)
		if err := pinTasks(os.Getpid(), was); err != nil {
			t.Errorf("unpinning this process: %v", err)
		}
	}
}

// start starts cmd on the services' CPUs: from a thread of its own whose
// mask is the services', so the new process and every thread it ever
// starts have that mask from birth. (The Go runtime never starts threads
// from a locked thread, and the thread ends with the goroutine; but for
// the main thread, which the runtime keeps, idle, so it gets the load's
// mask back.)
func (p pinning) start(cmd *exec.Cmd) error {
	if !p.on {
		return cmd.Start()
	}
	cmd.Env = append(cmd.Env, p.env()...)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		if err := unix.SchedSetaffinity(0, &p.svc); err != nil {
			done <- fmt.Errorf("sched_setaffinity: %w", err)
			return
		}
		err := cmd.Start()
		if err2 := unix.SchedSetaffinity(0, &p.load); err2 != nil && err == nil {
			err = fmt.Errorf("sched_setaffinity back to the load's CPUs: %w", err2)
		}
		done <- err
	}()
	return <-done
}

// pinTasks sets the mask of every thread of process pid, again until a
// pass finds no thread it had not set (threads may start meanwhile).
func pinTasks(pid int, set unix.CPUSet) error {
	seen := map[int]bool{}
	for range 10 {
		tids, err := tasks(pid)
		if err != nil {
			return err
		}
		fresh := 0
		for _, tid := range tids {
			if seen[tid] {
				continue
			}
			fresh++
			seen[tid] = true
			if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("sched_setaffinity %d: %w", tid, err)
			}
		}
		if fresh == 0 {
			return nil
		}
	}
	return fmt.Errorf("process %d keeps starting threads", pid)
}

// tasks are the thread ids of process pid.
func tasks(pid int) ([]int, error) {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// checkPinned fails unless every thread of process pid may run on
// exactly want's CPUs, and says how many threads it looked at.
func checkPinned(pid int, want unix.CPUSet) (int, error) {
	tids, err := tasks(pid)
	if err != nil {
		return 0, err
	}
	for _, tid := range tids {
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &got); err != nil {
			if err == unix.ESRCH { // ended meanwhile
				continue
			}
			return 0, fmt.Errorf("sched_getaffinity %d: %w", tid, err)
		}
		if got != want {
			return 0, fmt.Errorf("thread %d of process %d runs on CPU %s, want %s", tid, pid, listString(got), listString(want))
		}
	}
	return len(tids), nil
}

// cpuList is the CPUs of s, in order.
func cpuList(s unix.CPUSet) []int {
	var cpus []int
	for c := 0; len(cpus) < s.Count(); c++ {
		if s.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

func listString(s unix.CPUSet) string {
	var b strings.Builder
	for i, c := range cpuList(s) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(c))
	}
	return b.String()
}
