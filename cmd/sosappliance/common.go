package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/appliance/desired"
	"github.com/sosappliance/sosappliance/appliance/store"
)

// nodeFlags are the flags every command that acts on one node shares.
type nodeFlags struct {
	config string
	node   string
	state  string
	root   string
	socket string
}

func (f *nodeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.config, "config", "c", defaultConfigPath, "configuration file")
	cmd.Flags().StringVar(&f.node, "node", "", "node name (default: the hostname)")
	cmd.Flags().StringVar(&f.state, "state", "", "state database (default: daemon.state_path of the config)")
	cmd.Flags().StringVar(&f.socket, "control-socket", "", "control socket of a running daemon (default: daemon.control_socket)")
	cmd.Flags().StringVar(&f.root, "root", "/", "root of the host tree the executors read and write")
	_ = cmd.Flags().MarkHidden("root")
}

func (f *nodeFlags) nodeName() (string, error) {
	if f.node != "" {
		return f.node, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("node name: %w (pass --node)", err)
	}
	return h, nil
}

// loadConfig decodes the file and prints its diagnostics; an invalid file is
// exit status 1.
func loadConfig(w io.Writer, path string) (*config.Config, config.Source, error) {
	cfg, src, diags := config.LoadFile(path)
	config.WriteDiagnostics(w, diags, src.Bytes)
	if diags.HasErrors() {
		return nil, src, exitError{code: 1, msg: fmt.Sprintf("%s: %d problem(s)", path, len(diags.Errs()))}
	}
	return cfg, src, nil
}

// compile loads the file and computes this node's desired state.
func (f *nodeFlags) compile(cmd *cobra.Command) (*config.Config, config.Source, *desired.Desired, error) {
	cfg, src, err := loadConfig(cmd.ErrOrStderr(), f.config)
	if err != nil {
		return nil, src, nil, err
	}
	node, err := f.nodeName()
	if err != nil {
		return nil, src, nil, err
	}
	d, err := desired.Compile(cfg, node)
	if err != nil {
		return nil, src, nil, err
	}
	return cfg, src, d, nil
}

func (f *nodeFlags) statePath(cfg *config.Config) string {
	switch {
	case f.state != "":
		return f.state
	case cfg != nil:
		return cfg.Daemon.StatePath
	}
	return config.DefaultStatePath
}

func (f *nodeFlags) controlSocket(cfg *config.Config) string {
	if f.socket != "" {
		return f.socket
	}
	return cfg.Daemon.ControlSocket
}

func openStore(path string) (*store.Store, error) {
	st, err := store.Open(path, store.Options{})
	if errors.Is(err, fs.ErrPermission) && os.Geteuid() != 0 {
		return nil, fmt.Errorf("open state: %w (the state database %s is root's, and plan reads the node's kernel state as it is: run it as root)", err, path)
	}
	if err != nil {
		return nil, fmt.Errorf("open state: %w", err)
	}
	return st, nil
}

// confirm asks before changing the host, as Terraform does. Without a
// terminal to ask, the caller must say --auto-approve.
func confirm(cmd *cobra.Command, autoApprove bool, question string) error {
	if autoApprove {
		return nil
	}
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok {
		if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
			return exitError{code: 1, msg: "refusing to change the host without a terminal to confirm; pass --auto-approve"}
		}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "\n%s Only 'yes' will be accepted: ", question)
	line, _ := bufio.NewReader(in).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		return exitError{code: 1, msg: "cancelled"}
	}
	return nil
}

// normalizeArgs accepts Terraform-style single-dash long flags (-json,
// -out=FILE, -detailed-exitcode, -auto-approve) as the design documents
// them, by rewriting them to the double-dash form cobra parses.
func normalizeArgs(args []string) []string {
	long := map[string]bool{
		"json": true, "out": true, "detailed-exitcode": true, "auto-approve": true,
		"node": true, "config": true, "state": true, "root": true, "forget-gone": true, "switch-wait": true,
		"cluster": true, "control-socket": true, "drift-interval": true, "interval": true, "log-format": true,
		"log-level": true, "metrics-listen": true, "settle": true, "watch": true, "this-node": true,
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if a == "--" {
			copy(out[i:], args[i:])
			break
		}
		if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && len(a) > 2 {
			name, _, _ := strings.Cut(a[1:], "=")
			if long[name] {
				out[i] = "-" + a
			}
		}
	}
	return out
}

// loadConfigQuiet decodes the file without printing; bad reports whether it
// had errors.
func loadConfigQuiet(path string) (*config.Config, config.Source, bool) {
	cfg, src, diags := config.LoadFile(path)
	return cfg, src, diags.HasErrors()
}
