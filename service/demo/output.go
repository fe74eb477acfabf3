package demo

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden"
)

// maxReplicaColumns is the most replicas the table shows one column each;
// beyond it, one column shows the range.
const maxReplicaColumns = 6

func printHeader(w io.Writer, cfg *Config, rep *Report) {
	fmt.Fprintf(w, "ratewarden demo: one client, %s behind a round-robin proxy (all on 127.0.0.1)\n", plural(cfg.Replicas, "API replica", "API replicas"))
	fmt.Fprintf(w, "  limit:        %s  (the promise: at most %s per %s for this client)\n", limitText(cfg.Limit), plural(int(cfg.Limit.Capacity()), "request", "requests"), periodOf(cfg.Limit))
	fmt.Fprintf(w, "  traffic:      %s per run, %d in flight\n", plural(cfg.Requests, "request", "requests"), cfg.Concurrency)
	fmt.Fprintf(w, "  shared state: %s\n", rep.Shared)
	if cfg.Race {
		fmt.Fprintf(w, "  race mode:    a naive GET, compare, SET counter (up to %s) vs ratewarden's atomic script\n", plural(cfg.RaceAttempts, "attempt", "attempts"))
	}
	fmt.Fprintln(w)
}

func printReport(w io.Writer, rep *Report) {
	head := []string{"run"}
	if rep.Replicas <= maxReplicaColumns {
		for i := range rep.Replicas {
			head = append(head, "replica "+strconv.Itoa(i+1))
		}
	} else {
		head = append(head, "per replica")
	}
	head = append(head, "admitted", "rejected", "limit", "")
	rows := [][]string{head}
	var notes []string
	for _, r := range rep.Runs {
		row := []string{runTitle(r)}
		if rep.Replicas <= maxReplicaColumns {
			for _, c := range r.Replicas {
				row = append(row, strconv.Itoa(c.Admitted))
			}
		} else {
			lo, hi := r.Replicas[0].Admitted, r.Replicas[0].Admitted
			for _, c := range r.Replicas {
				lo, hi = min(lo, c.Admitted), max(hi, c.Admitted)
			}
			row = append(row, fmt.Sprintf("%d..%d", lo, hi))
		}
		row = append(row, strconv.Itoa(r.Admitted), strconv.Itoa(r.Rejected), strconv.FormatInt(rep.Limit.Capacity(), 10), verdict(r, rep.Limit.Capacity()))
		rows = append(rows, row)
		if r.Note != "" {
			notes = append(notes, runTitle(r)+": "+r.Note)
		}
	}
	writeTable(w, rows)
	fmt.Fprintln(w, "  (replica columns: the requests each replica admitted)")
	for _, n := range notes {
		fmt.Fprintln(w, "  note: "+n)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, conclusion(rep))
	if rep.Chart != "" {
		runs := "both runs"
		if rep.Race {
			runs = "the last naive attempt, the atomic script"
		}
		fmt.Fprintf(w, "\nchart: %s (admitted requests as the run goes, %s and the limit; open it in a browser)\n", rep.Chart, runs)
	}
}

// writeTable prints rows with the first and last columns left-aligned and
// the others (numbers) right-aligned, two spaces apart.
func writeTable(w io.Writer, rows [][]string) {
	var width []int
	for _, r := range rows {
		for i, c := range r {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for _, r := range rows {
		var b strings.Builder
		b.WriteString("  ")
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			switch {
			case i == 0:
				b.WriteString(c + pad)
			case i == len(r)-1:
				b.WriteString("  " + c)
			default:
				b.WriteString("  " + pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

func runTitle(r RunResult) string { return r.Label }

// verdict compares what a run admitted with the promised limit.
func verdict(r RunResult, limit int64) string {
	a := int64(r.Admitted)
	switch {
	case a == limit:
		return "exactly the limit"
	case a > limit && a%limit == 0:
		return fmt.Sprintf("%d× the limit", a/limit)
	case a > limit:
		return fmt.Sprintf("%d over the limit", a-limit)
	default:
		return fmt.Sprintf("%d under the limit", limit-a)
	}
}

// conclusion is the one-paragraph reading of the table.
func conclusion(rep *Report) string {
	limit := rep.Limit.Capacity()
	find := func(name string) *RunResult {
		for i := len(rep.Runs) - 1; i >= 0; i-- {
			if rep.Runs[i].Name == name {
				return &rep.Runs[i]
			}
		}
		return nil
	}
	if local, shared := find(RunLocal), find(RunShared); local != nil && shared != nil {
		s := fmt.Sprintf("With a limiter in each replica's memory the client got %s through, not %d:\n"+
			"%s counted only the requests the proxy happened to send it.\n",
			plural(local.Admitted, "request", "requests"), limit, eachReplica(rep.Replicas))
		if int64(shared.Admitted) == limit {
			s += fmt.Sprintf("With one shared limiter it got exactly %d, however the proxy spread the requests.", limit)
		} else {
			s += fmt.Sprintf("With one shared limiter it got %d (expected %d; see the note above).", shared.Admitted, shared.Expected)
		}
		return s
	}
	naive, atomic := find(RunNaive), find(RunAtomic)
	if naive == nil || atomic == nil {
		return ""
	}
	var s string
	if rep.RaceShown {
		s = fmt.Sprintf("The naive counter let %d requests through a limit of %d (attempt %d): replicas read the same\n"+
			"count before any of them wrote count+1, so several admitted a request on one count and their\n"+
			"writes overwrote each other. Redis' counter reads %d, yet %d requests passed.\n",
			naive.Admitted, limit, naive.Attempt, naive.Counter, naive.Admitted)
	} else {
		s = fmt.Sprintf("The race did not show this time: in %s the naive counter admitted exactly %d.\n"+
			"It is still there; more requests in flight make it likely (try --concurrency %d).\n",
			plural(naive.Attempt, "attempt", "attempts"), naive.Admitted, max(64, 4*rep.Concurrency))
	}
	if int64(atomic.Admitted) == limit {
		s += fmt.Sprintf("The atomic script (one Lua call per check) admitted exactly %d.", limit)
	} else {
		s += fmt.Sprintf("The atomic script admitted %d (expected %d; see the note above).", atomic.Admitted, atomic.Expected)
	}
	return s
}

// limitText is l's String form with the algorithm always named (String
// leaves out the default one): the demo is about how a limit counts.
func limitText(l ratewarden.Limit) string {
	if l.Algorithm == ratewarden.DefaultAlgorithm {
		return l.String() + " " + l.Algorithm.String()
	}
	return l.String()
}

// periodOf is the period as the limit's String form writes it ("1m").
func periodOf(l ratewarden.Limit) string {
	_, p, _ := strings.Cut(strings.Fields(l.String())[0], "/")
	return p
}

// plural is "1 replica" or "3 replicas": n with the word for its number.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// eachReplica starts the sentence on what each local limiter counted.
func eachReplica(n int) string {
	if n == 1 {
		return "its one replica"
	}
	return "each of the " + strconv.Itoa(n) + " replicas"
}
