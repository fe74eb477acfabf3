//go:build !unix

package server

import "testing"

// CPUMeter reports nothing where the process's CPU time is not read.
type CPUMeter struct{}

// StartCPU starts a CPUMeter.
func StartCPU() CPUMeter { return CPUMeter{} }

// Stop reports nothing.
func (CPUMeter) Stop(*testing.B) {}
