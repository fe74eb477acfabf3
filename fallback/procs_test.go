package fallback

// Replicas in processes of their own: the test binary run again with a job
// (internal/childproc; TestMain hands it to runReplica). Each process has its
// own Go runtime, client, redisstore and fallback Store, as the replicas of
// a service do; the parent injects the faults and adds up the reports.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/childproc"
	"github.com/ratewarden/ratewarden/redisstore"
	"github.com/redis/rueidis"
)

// replicaJob is what one replica process does: Callers goroutines check
// keys from Start (wall clock; the processes share it) for Duration.
type replicaJob struct {
	Addr     string
	Policy   Policy
	Replicas int
	Callers  int
	Limit    string // ratewarden.ParseLimit
	Start    time.Time
	Duration time.Duration
	// Keys is how many healthy keys the callers spread over ("k:<i>").
	Keys int
	// BadKey, if set, gets every BadEvery-th check of each caller.
	BadKey   string
	BadEvery int
	// HotKey, if set, is checked instead of the healthy keys from HotFrom
	// on (before it, the callers only warm up on "warm").
	HotKey  string
	HotFrom time.Time
	// Timeout and Grace are WithTimeout and WithGrace; 0 keeps the default.
	Timeout, Grace time.Duration
}

// replicaReport is what a replica process counted.
type replicaReport struct {
	Checks     int64
	Errors     int64
	FirstError string
	// Healthy and Bad count the answers for the healthy keys and for
	// BadKey by Source; Allowed counts admissions of the key checked.
	Healthy, Bad            map[string]int64
	HealthyAllowed, Allowed int64
	Opened                  int64 // times the breaker opened
	KeyStateErrors          int64
	Causes                  map[string]int64 // degraded answers by the kind of cause
	Reconciled              int64
	// MaxStall is the longest the process was late waking up (a 10ms
	// ticker): how long the machine left it without a CPU at its worst.
	MaxStall time.Duration
}

// runReplica runs one child's job (childproc.Serve).
func runReplica(spec []byte) (any, error) {
	var job replicaJob
	if err := json.Unmarshal(spec, &job); err != nil {
		return nil, fmt.Errorf("replica job: %w", err)
	}
	return job.run()
}

func (job *replicaJob) run() (*replicaReport, error) {
	lim, err := ratewarden.ParseLimit(job.Limit)
	if err != nil {
		return nil, err
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{job.Addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	rs, err := redisstore.New(c)
	if err != nil {
		return nil, err
	}
	var opened atomic.Int64
	var causesMu sync.Mutex
	causes := map[string]int64{}
	opts := []Option{}
	if job.Timeout > 0 {
		opts = append(opts, WithTimeout(job.Timeout))
	}
	if job.Grace > 0 {
		opts = append(opts, WithGrace(job.Grace))
	}
	fb, err := New(rs, append(opts, WithPolicy(job.Policy), WithReplicas(max(job.Replicas, 1)),
		WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))),
		WithOnStateChange(func(_, to State) {
			if to == StateOpen {
				opened.Add(1)
			}
		}),
		WithOnDegraded(func(_ Policy, cause error) {
			causesMu.Lock()
			causes[causeKind(cause)]++
			causesMu.Unlock()
		}))...)
	if err != nil {
		return nil, err
	}
	l, err := ratewarden.New(fb)
	if err != nil {
		return nil, err
	}
	stalls := watchStalls(job.Start.Add(job.Duration))
	rep := job.drive(l, lim)
	rep.MaxStall = <-stalls
	rep.Opened, rep.KeyStateErrors, rep.Causes = opened.Load(), fb.KeyStateErrors(), causes
	// What a recovery wrote back (its grace may still run: the process
	// ends with it).
	rep.Reconciled = fb.Reconciled()
	return rep, nil
}

// watchStalls measures, until end, how late a 10ms ticker fires at worst,
// and sends it.
func watchStalls(end time.Time) <-chan time.Duration {
	out := make(chan time.Duration, 1)
	go func() {
		var worst time.Duration
		last := time.Now()
		for now := range time.Tick(10 * time.Millisecond) {
			worst = max(worst, now.Sub(last)-10*time.Millisecond)
			last = now
			if now.After(end) {
				break
			}
		}
		out <- worst
	}()
	return out
}

func causeKind(err error) string {
	switch {
	case err == ErrRecovering:
		return "recovering"
	case err == ErrOpen:
		return "open"
	default:
		return ratewarden.Classify(context.Background(), err).String()
	}
}

// drive runs the callers and counts what came back.
func (job *replicaJob) drive(l *ratewarden.Limiter, lim ratewarden.Limit) *replicaReport {
	time.Sleep(time.Until(job.Start))
	end := job.Start.Add(job.Duration)
	var mu sync.Mutex
	rep := &replicaReport{Healthy: map[string]int64{}, Bad: map[string]int64{}}
	var wg sync.WaitGroup
	for w := range job.Callers {
		wg.Go(func() {
			healthy, bad := map[string]int64{}, map[string]int64{}
			var checks, errs, hAllowed, allowed int64
			var first string
			for i := 0; time.Now().Before(end); i++ {
				key, isBad := "k:"+strconv.Itoa((w*7919+i)%max(job.Keys, 1)), false
				switch {
				case job.HotKey != "" && !time.Now().Before(job.HotFrom):
					key = job.HotKey
				case job.HotKey != "":
					key = "warm"
				case job.BadKey != "" && i%job.BadEvery == 0:
					key, isBad = job.BadKey, true
				}
				r, err := l.Allow(context.Background(), key, lim)
				checks++
				if err != nil {
					errs++
					if first == "" {
						first = err.Error()
					}
					continue
				}
				switch {
				case isBad:
					bad[r.Source.String()]++
				case key == job.HotKey:
					if r.Allowed {
						allowed++
					}
				default:
					healthy[r.Source.String()]++
					if r.Allowed {
						hAllowed++
					}
				}
				if job.HotKey != "" && key == "warm" {
					time.Sleep(time.Millisecond) // warm up, not flood
				}
			}
			mu.Lock()
			defer mu.Unlock()
			rep.Checks, rep.Errors, rep.HealthyAllowed, rep.Allowed = rep.Checks+checks, rep.Errors+errs, rep.HealthyAllowed+hAllowed, rep.Allowed+allowed
			if rep.FirstError == "" {
				rep.FirstError = first
			}
			for k, v := range healthy {
				rep.Healthy[k] += v
			}
			for k, v := range bad {
				rep.Bad[k] += v
			}
		})
	}
	wg.Wait()
	return rep
}

// runReplicas runs n replica processes on job (Start set by the caller)
// and returns their reports. The processes end by themselves after the
// job's Duration.
func runReplicas(t *testing.T, n int, job replicaJob) []*replicaReport {
	t.Helper()
	return childproc.Run[replicaReport](t, n, job, time.Until(job.Start)+job.Duration+2*time.Minute)
}

// sum adds up the reports.
func sum(reps []*replicaReport) *replicaReport {
	tot := &replicaReport{Healthy: map[string]int64{}, Bad: map[string]int64{}, Causes: map[string]int64{}}
	for _, r := range reps {
		tot.Checks += r.Checks
		tot.Errors += r.Errors
		tot.HealthyAllowed += r.HealthyAllowed
		tot.Allowed += r.Allowed
		tot.Opened += r.Opened
		tot.KeyStateErrors += r.KeyStateErrors
		tot.Reconciled += r.Reconciled
		tot.MaxStall = max(tot.MaxStall, r.MaxStall)
		if tot.FirstError == "" {
			tot.FirstError = r.FirstError
		}
		for k, v := range r.Healthy {
			tot.Healthy[k] += v
		}
		for k, v := range r.Bad {
			tot.Bad[k] += v
		}
		for k, v := range r.Causes {
			tot.Causes[k] += v
		}
	}
	return tot
}
