package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"

	"github.com/hashicorp/hcl/v2"
	"github.com/spf13/cobra"

	"github.com/sosappliance/sosappliance/appliance"
	"github.com/sosappliance/sosappliance/appliance/config"
	"github.com/sosappliance/sosappliance/appliance/desired"
	"github.com/sosappliance/sosappliance/internal/filetrust"
)

func newValidateCommand() *cobra.Command {
	var (
		path     string
		node     string
		thisNode bool
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check sos.hcl and print every problem with file:line:col",
		Long: `validate decodes and checks the configuration without touching the node.
It also compiles what each node the file names would run, so that a
problem of one node's (two of its tunings setting one value differently)
shows here rather than at its plan. It exits 0 when the file is valid and
1 when it is not, listing every problem. With --node NAME (or --this-node,
this host's name, which run takes) it also checks that the file gives
that node a role, as run on it needs: the package checks so before it
restarts the daemon onto an edited file. --this-node also reads, on this
host, the files run reads at start (the psk_file, the agents' key_file
against their public_key, TLS files), as run would; with --node NAME too,
it checks NAME as run on this host.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep := &validateReport{Path: path, Diagnostics: []validateDiag{}}
			err := validateFile(rep, path, node, thisNode)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetEscapeHTML(false) // "10.0.0.0/8 -> ..." as written
				enc.SetIndent("", "  ")
				if jerr := enc.Encode(rep); jerr != nil {
					return jerr
				}
			} else {
				rep.writeText(cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			if err != nil {
				return err
			}
			if !rep.Valid {
				return exitError{code: 1, msg: fmt.Sprintf("%s: %d problem(s)", path, rep.Errors)}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", defaultConfigPath, "configuration file")
	cmd.Flags().StringVar(&node, "node", "", "also check that this node has a role in the file")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON on stdout: valid, the error and warning counts, each diagnostic with its place")
	cmd.Flags().BoolVar(&thisNode, "this-node", false, "also check that this host's node (its hostname, as run takes it) has a role in the file, and read the key and TLS files run reads there")
	return cmd
}

// validateReport is what validate found, for text or --json.
type validateReport struct {
	Path        string         `json:"path"`
	Valid       bool           `json:"valid"`
	Errors      int            `json:"error_count"`
	Warnings    int            `json:"warning_count"`
	Diagnostics []validateDiag `json:"diagnostics"`
	// Of a valid file (absent for one that is not; a valid one without
	// whitelists has "whitelists": []):
	Sites      *int             `json:"sites,omitempty"`
	Agents     *int             `json:"agents,omitempty"`
	Whitelists *[]whitelistLine `json:"whitelists,omitempty"`

	src   []byte
	diags hcl.Diagnostics // the file's own, as LoadFile gave them
}

type validateDiag struct {
	Severity string `json:"severity"` // "error" or "warning"
	Summary  string `json:"summary"`
	Detail   string `json:"detail,omitempty"`
	// Node is set for a problem of one node's compile or files.
	Node  string     `json:"node,omitempty"`
	Range *jsonRange `json:"range,omitempty"`
}

// jsonRange is a place in the file, as terraform validate -json gives it.
type jsonRange struct {
	Filename string  `json:"filename"`
	Start    jsonPos `json:"start"`
	End      jsonPos `json:"end"`
}

type jsonPos struct {
	Line   int `json:"line"`
	Column int `json:"column"`
	Byte   int `json:"byte"`
}

type whitelistLine struct {
	Name     string `json:"name"`
	Describe string `json:"describe"`
}

func (r *validateReport) add(severity, node, summary, detail string, rng *hcl.Range) {
	var at *jsonRange
	if rng != nil {
		at = &jsonRange{rng.Filename, jsonPos{rng.Start.Line, rng.Start.Column, rng.Start.Byte}, jsonPos{rng.End.Line, rng.End.Column, rng.End.Byte}}
	}
	r.Diagnostics = append(r.Diagnostics, validateDiag{Severity: severity, Summary: summary, Detail: detail, Node: node, Range: at})
	if severity == "error" {
		r.Errors++
	} else {
		r.Warnings++
	}
}

// validateFile checks the file as validate does, into rep. Its error is
// one validate cannot go on from (this host's name unknown).
func validateFile(rep *validateReport, path, node string, thisNode bool) error {
	cfg, src, diags := config.LoadFile(path)
	rep.src, rep.diags = src.Bytes, diags
	for _, d := range diags {
		sev := "error"
		if d.Severity == hcl.DiagWarning {
			sev = "warning"
		}
		rep.add(sev, "", d.Summary, d.Detail, d.Subject)
	}
	if diags.HasErrors() {
		return nil
	}
	if !thisNode { // with --this-node, CheckNodeFiles refuses it
		if err := filetrust.Check("config file", path); err != nil {
			rep.add("warning", "", fmt.Sprintf("%v; apply and run refuse it", err), "", nil)
		}
	}
	// What each node would run: a problem of one node's (two of its
	// tunings disagreeing) is found here, not at its plan.
	for _, n := range desired.Nodes(cfg) {
		if _, err := desired.Compile(cfg, n); err != nil {
			rep.add("error", n, err.Error(), "", nil)
		}
	}
	if thisNode && node == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("node name: %w (pass --node)", err)
		}
		node = h
	}
	// A node the loop above compiled said its problem there.
	if node != "" && !slices.Contains(desired.Nodes(cfg), node) {
		if _, err := desired.Compile(cfg, node); err != nil {
			rep.add("error", node, err.Error(), "", nil)
		}
	}
	if thisNode && rep.Errors == 0 {
		// This host is the node: what run reads at start.
		if err := appliance.CheckNodeFiles(path, node); err != nil {
			hint := ""
			if errors.Is(err, fs.ErrPermission) && os.Geteuid() != 0 {
				hint = "--this-node reads the files as run does: run it as root"
			}
			rep.add("error", node, err.Error(), hint, nil)
		}
	}
	if rep.Errors > 0 {
		return nil
	}
	rep.Valid = true
	sites, agents, lines := len(cfg.Sites), 0, []whitelistLine{}
	for _, s := range cfg.Sites {
		agents += len(s.Agents)
	}
	for _, w := range cfg.Whitelists {
		lines = append(lines, whitelistLine{w.Name, w.Describe()})
	}
	rep.Sites, rep.Agents, rep.Whitelists = &sites, &agents, &lines
	return nil
}

// writeText is validate's text: the file's diagnostics as WriteDiagnostics
// quotes them, the rest one line each, on errOut; the summary of a valid
// file on out.
func (r *validateReport) writeText(out, errOut io.Writer) {
	config.WriteDiagnostics(errOut, r.diags, r.src)
	for _, d := range r.Diagnostics[len(r.diags):] {
		switch {
		case d.Node != "" && d.Detail != "":
			fmt.Fprintf(errOut, "%s: node %s: %s: %s (%s)\n", r.Path, d.Node, d.Severity, d.Summary, d.Detail)
		case d.Node != "":
			fmt.Fprintf(errOut, "%s: node %s: %s: %s\n", r.Path, d.Node, d.Severity, d.Summary)
		default:
			fmt.Fprintf(errOut, "%s: %s\n", d.Severity, d.Summary)
		}
	}
	if !r.Valid {
		return
	}
	fmt.Fprintf(out, "%s is valid: %d site(s), %d agent(s), %d whitelist(s)\n", r.Path, *r.Sites, *r.Agents, len(*r.Whitelists))
	for _, w := range *r.Whitelists {
		fmt.Fprintf(out, "  whitelist %s: %s\n", w.Name, w.Describe)
	}
}
