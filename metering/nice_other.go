//go:build !linux

package metering

// lowerPriority does nothing where threads have no priority of their own.
func lowerPriority(int) error { return nil }
