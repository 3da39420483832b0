package metering

import (
	"runtime"
	"syscall"
)

// lowerPriority locks the calling goroutine to its thread and sets that
// thread's nice value to n. The goroutine must not unlock it: a thread
// still locked when its goroutine returns is ended by the runtime, so no
// other goroutine ever runs at the lowered priority.
func lowerPriority(n int) error {
	runtime.LockOSThread()
	return syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), n)
}
