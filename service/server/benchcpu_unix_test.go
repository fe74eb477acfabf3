//go:build unix

package server

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// CPUMeter reports the process's CPU time per operation of a benchmark
// as cpu-ns/op: on a busy machine, wall time per operation says how much
// of the CPU the benchmark got, this says what an operation costs. Start
// it right after ResetTimer; Stop reports.
type CPUMeter struct{ start time.Duration }

// StartCPU starts a CPUMeter.
func StartCPU() CPUMeter { return CPUMeter{processCPU()} }

// Stop reports the CPU time per operation since StartCPU.
func (m CPUMeter) Stop(b *testing.B) {
	if b.N > 0 {
		b.ReportMetric(float64(processCPU()-m.start)/float64(b.N), "cpu-ns/op")
	}
}
