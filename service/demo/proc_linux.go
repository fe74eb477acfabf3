package demo

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the child when this process dies,
// even by SIGKILL, so a redis-server never outlives the demo.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
