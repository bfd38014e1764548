package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/sosappliance/sosappliance/appliance"
	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/appliance/desired"
	"github.com/sosappliance/sosappliance/sdn"
	"github.com/sosappliance/sosappliance/sdn/flows"
)

// switchesOf returns the controller role's switches with their dial
// addresses filled in.
func switchesOf(ctl *desired.Controller) []flows.Switch {
	out := make([]flows.Switch, len(ctl.Switches))
	for i, sw := range ctl.Switches {
		sw.Connect = ctl.Connect[sw.Name]
		out[i] = sw
	}
	return out
}

// planFlows diffs every switch of the controller node. Switches connected to
// a running daemon are read through it; a switch that listens (connect =
// "tcp:...") is dialed; any other is reported as not reachable now.
func planFlows(ctx context.Context, cfg *config.Config, socket string, ctl *desired.Controller) []appliance.FlowPlan {
	switches := switchesOf(ctl)
	byName := map[string]appliance.FlowPlan{}
	if live, err := appliance.FetchFlowPlan(ctx, socket, switches); err == nil {
		for _, fp := range live {
			byName[fp.Switch] = fp
		}
	}
	out := make([]appliance.FlowPlan, 0, len(switches))
	for _, sw := range switches {
		if fp, ok := byName[sw.Name]; ok && fp.Connected {
			out = append(out, fp)
			continue
		}
		fp := appliance.FlowPlan{Switch: sw.Name}
		if sw.Connect == "" {
			fp.Error = fmt.Sprintf("not connected: it dials the controller at %s; its flows converge once `sosappliance run` runs here", cfg.Controller.Listen)
			out = append(out, fp)
			continue
		}
		sc, err := sdn.Dial(ctx, sw.Connect, sdn.ConnOptions{})
		if err != nil {
			fp.Error = err.Error()
			out = append(out, fp)
			continue
		}
		fp.Connected = true
		desiredFlows, err := flows.Compile(sw)
		if err == nil {
			var changes flows.Changes
			changes, err = sdn.Plan(ctx, sc, desiredFlows)
			for _, ch := range changes.List() {
				fp.Changes = append(fp.Changes, ch.String())
			}
		}
		if err != nil {
			fp.Error = err.Error()
		}
		sc.Close()
		out = append(out, fp)
	}
	return out
}

func writeFlowPlans(w io.Writer, plans []appliance.FlowPlan) (changes int) {
	for _, fp := range plans {
		fmt.Fprintf(w, "\n  flows on switch %s\n", fp.Switch)
		if fp.Error != "" {
			fmt.Fprintf(w, "    ! %s\n", fp.Error)
		}
		for _, ch := range fp.Changes {
			fmt.Fprintf(w, "    %s\n", ch)
		}
		if fp.Connected && fp.Error == "" && len(fp.Changes) == 0 {
			fmt.Fprintln(w, "    (no changes)")
		}
		changes += len(fp.Changes)
	}
	return changes
}

// applyFlows converges the switches of the controller node when no daemon
// does it already: switches that listen are dialed, switches that dial in
// are awaited on controller.listen for up to wait.
func applyFlows(ctx context.Context, w io.Writer, cfg *config.Config, socket string, ctl *desired.Controller, wait time.Duration) error {
	if _, err := appliance.FetchStatus(ctx, socket); err == nil {
		fmt.Fprintln(w, "\nSwitch flows: the running daemon converges them itself (it reloads this file on edit).")
		return nil
	}
	var errs []error
	var ln net.Listener
	var serverTLS *tls.Config
	if f := ctl.TLS; f != nil && wait > 0 {
		var err error
		if serverTLS, err = sdn.LoadTLS(f.CertFile, f.KeyFile, f.CAFile); err != nil {
			return fmt.Errorf("controller tls: %w", err)
		}
	}
	defer func() {
		if ln != nil {
			ln.Close()
		}
	}()
	for _, sw := range switchesOf(ctl) {
		desiredFlows, err := flows.Compile(sw)
		if err != nil {
			errs = append(errs, fmt.Errorf("switch %s: %w", sw.Name, err))
			continue
		}
		var sc *sdn.SwitchConn
		if sw.Connect != "" {
			sc, err = sdn.Dial(ctx, sw.Connect, sdn.ConnOptions{})
		} else {
			if wait <= 0 {
				fmt.Fprintf(w, "\nSwitch %s dials the controller; pass --switch-wait to wait for it here, or run `sosappliance run`.\n", sw.Name)
				continue
			}
			if ln == nil {
				if ln, err = net.Listen("tcp", cfg.Controller.Listen); err != nil {
					errs = append(errs, fmt.Errorf("controller listen %s: %w", cfg.Controller.Listen, err))
					break
				}
			}
			fmt.Fprintf(w, "\nWaiting up to %s for switch %s to connect to %s ...\n", wait, sw.Name, cfg.Controller.Listen)
			actx, cancel := context.WithTimeout(ctx, wait)
			sc, err = sdn.AcceptSwitch(actx, ln, sw, serverTLS, sdn.ConnOptions{Logger: slog.New(slog.DiscardHandler)})
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				// The listener closes with the wait; open a new one for
				// the next switch.
				ln = nil
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("switch %s: %w", sw.Name, err))
			continue
		}
		res, err := sdn.ConvergeOnce(ctx, sc, desiredFlows)
		sc.Close()
		fmt.Fprintf(w, "Switch %s: %d flow mod(s) sent.\n", sw.Name, res.Sent)
		if err != nil {
			errs = append(errs, fmt.Errorf("switch %s: %w", sw.Name, err))
		}
	}
	return errors.Join(errs...)
}
