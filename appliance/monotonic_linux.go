package appliance

import "golang.org/x/sys/unix"

func monotonicUsec() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Sec*1e6 + ts.Nsec/1e3
}
