package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sosappliance/sosappliance/appliance"
	"github.com/sosappliance/sosappliance/appliance/config"
)

func newRunCommand() *cobra.Command {
	var (
		nf                        nodeFlags
		logFormat                 string
		metricsListen, logLevel   string
		driftInterval, settleTime time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the daemon: converge, watch and reload",
		Long: `run converges this node to the config (host tuning, steering, relays, switch
flows), then keeps it converged: it reloads when the file is edited or on
SIGHUP, corrects drift every daemon.drift_interval, and serves status on the
control socket and metrics on daemon.metrics_listen. A reload that fails
leaves the last good config running. It speaks the systemd notify protocol
when started by systemd (Type=notify).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			node, err := nf.nodeName()
			if err != nil {
				return err
			}
			if driftInterval != 0 && driftInterval < time.Second {
				// As daemon.drift_interval's floor: each turn converges.
				return exitError{code: 1, msg: fmt.Sprintf("--drift-interval %s: at least 1s", driftInterval)}
			}
			if logFormat == "" {
				logFormat = "text"
				if cfg, _, bad := loadConfigQuiet(nf.config); !bad && cfg != nil {
					logFormat = cfg.Daemon.LogFormat
				}
			}
			logger, err := newLogger(cmd, logFormat, logLevel)
			if err != nil {
				return err
			}
			opts := appliance.Options{
				ConfigPath: nf.config, Node: node, StatePath: nf.state, ControlSocket: nf.socket,
				Root: nf.root, Logger: logger, DriftInterval: driftInterval, Settle: settleTime,
			}
			if cmd.Flags().Changed("metrics-listen") {
				opts.MetricsListen = &metricsListen
			}
			d, err := appliance.NewDaemon(opts)
			if err != nil {
				return err
			}
			err = d.Run(context.Background())
			var ce *appliance.ConfigError
			if errors.As(err, &ce) {
				config.WriteDiagnostics(cmd.ErrOrStderr(), ce.Diagnostics, ce.Source.Bytes)
				return exitError{code: 1, msg: err.Error()}
			}
			return err
		},
	}
	nf.register(cmd)
	cmd.Flags().StringVar(&metricsListen, "metrics-listen", "", `metrics address (default: daemon.metrics_listen; "" turns metrics off)`)
	cmd.Flags().StringVar(&logFormat, "log-format", "", `"text" or "json" (default: daemon.log_format)`)
	cmd.Flags().StringVar(&logLevel, "log-level", "info", `"debug", "info", "warn" or "error"`)
	cmd.Flags().DurationVar(&driftInterval, "drift-interval", 0, "override daemon.drift_interval")
	cmd.Flags().DurationVar(&settleTime, "settle", 200*time.Millisecond, "quiet time after a config edit before reloading")
	_ = cmd.Flags().MarkHidden("settle")
	return cmd
}

func newLogger(cmd *cobra.Command, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, exitError{code: 1, msg: fmt.Sprintf("--log-level %q: want debug, info, warn or error", level)}
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), opts)), nil
	}
	return nil, exitError{code: 1, msg: fmt.Sprintf("--log-format %q: want text or json", format)}
}

func newStatusCommand() *cobra.Command {
	var (
		cfgPath, socket string
		asJSON, watch   bool
		clusterWide     bool
		interval        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the running daemon's state",
		Long: `status asks the running daemon over its control socket for the config hash and
state serial, the last apply, drift corrections, switches, agents and live
sessions with their throughput. With --watch it redraws every --interval
until interrupted: the sessions with their throughput, streams and reorder
depth, the switches and the agents, fitted to the terminal.

With --cluster it reads, from the etcd of the file's cluster block, the
status every node publishes (node, roles, OpenFlow role, config hash, state
serial, last apply, health) and shows them in one table, flagging a node
that runs another file, one the file names that publishes nothing, and one
the file does not name; the exit status is then 2. No local daemon is
needed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if clusterWide {
				if watch {
					return exitError{code: 1, msg: "--cluster does not go with --watch"}
				}
				return clusterStatus(cmd, cfgPath, asJSON)
			}
			unread := ""
			if socket == "" {
				socket = config.DefaultControlSocket
				if cfg, _, bad := loadConfigQuiet(cfgPath); !bad && cfg != nil {
					socket = cfg.Daemon.ControlSocket
				} else if s := config.ControlSocketIn(cfgPath); s != "" {
					// A file the daemon refused at its reload still
					// names its socket.
					socket = s
				} else {
					unread = fmt.Sprintf(" (%s does not load, so the socket it names, if any, is unknown: pass --control-socket)", cfgPath)
				}
			}
			if watch {
				if asJSON {
					return exitError{code: 1, msg: "--watch draws for a terminal; it does not go with --json"}
				}
				if interval <= 0 {
					return exitError{code: 1, msg: "--interval must be positive"}
				}
				ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
				defer stop()
				return watchStatus(ctx, cmd.OutOrStdout(), socket, interval)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			st, err := appliance.FetchStatus(ctx, socket)
			if err != nil && unread != "" {
				return fmt.Errorf("%w%s", err, unread)
			}
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			st.WriteText(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().StringVarP(&cfgPath, "config", "c", defaultConfigPath, "configuration file (names the control socket)")
	cmd.Flags().StringVar(&socket, "control-socket", "", "control socket (default: daemon.control_socket of the config)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "redraw every --interval until interrupted")
	cmd.Flags().BoolVar(&clusterWide, "cluster", false, "show every node of the cluster, from etcd")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "redraw period of --watch")
	return cmd
}
