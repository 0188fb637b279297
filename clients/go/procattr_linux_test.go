// Child processes of the tests die with the test binary on Linux, even
// when it ends without cleaning up (a panic, a timeout).

//go:build linux

package lockgate_test

import "syscall"

func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
