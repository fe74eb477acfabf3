package redisproc

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill cmd's process when this one dies,
// even by SIGKILL, so a redis-server never outlives what started it.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
