// Elsewhere the tests' child processes are stopped by the tests' cleanup only.

//go:build !linux

package lockgate_test

import "syscall"

func dieWithParent() *syscall.SysProcAttr { return nil }
