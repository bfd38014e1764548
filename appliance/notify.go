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

func (n notifier) stopping() { n.send(daemon.SdNotifyStopping) }

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
