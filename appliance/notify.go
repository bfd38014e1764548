package appliance

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// notifier speaks the systemd notify protocol when NOTIFY_SOCKET is set and
// does nothing otherwise, so the daemon runs the same with or without
// systemd.
type notifier struct {
	log *slog.Logger
}

func (n notifier) send(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		n.log.Warn("systemd notify failed", "state", state, "err", err)
	}
}

func (n notifier) ready(status string) {
	n.send(daemon.SdNotifyReady + "\nSTATUS=" + status)
}

func (n notifier) reloading() {
	// Type=notify-reload wants MONOTONIC_USEC with RELOADING=1.
	n.send(fmt.Sprintf("%s\nMONOTONIC_USEC=%d", daemon.SdNotifyReloading, monotonicUsec()))
}

// stopping says the daemon stops and needs up to take for it: systemd
// kills a unit still stopping after its TimeoutStopSec (90 s unless set),
// which a longer daemon.shutdown_timeout would cut mid-drain.
func (n notifier) stopping(take time.Duration) {
	n.send(fmt.Sprintf("%s\nEXTEND_TIMEOUT_USEC=%d", daemon.SdNotifyStopping, take.Microseconds()))
}

func (n notifier) status(s string) { n.send("STATUS=" + s) }

// watchdog pings systemd at half the configured interval while ctx lives;
// healthy reports whether the main loop is still turning.
func (n notifier) watchdog(ctx context.Context, healthy func() bool) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval == 0 {
		return
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if healthy() {
				n.send(daemon.SdNotifyWatchdog)
			}
		}
	}
}
