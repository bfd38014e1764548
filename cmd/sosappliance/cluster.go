package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/sosappliance/sosappliance/appliance/cluster"
	"github.com/sosappliance/sosappliance/appliance/desired"
)

// clusterStatus prints every node's published status, read from etcd
// with the cluster block of the local file, against that file: a node on
// another file, one that publishes nothing, one the file does not name
// are flagged, and then the exit status is 2. It needs no local daemon.
func clusterStatus(cmd *cobra.Command, cfgPath string, asJSON bool) error {
	cfg, src, err := loadConfig(cmd.ErrOrStderr(), cfgPath)
	if err != nil {
		return err
	}
	if cfg.Cluster == nil {
		return exitError{code: 1, msg: cfgPath + " has no cluster block: there is no cluster to show"}
	}
	cc := cluster.Config{Endpoints: cfg.Cluster.Endpoints, Prefix: cfg.Cluster.Prefix, LeaseTTL: cfg.Cluster.LeaseTTL,
		DialTimeout: cfg.Cluster.DialTimeout}
	if t := cfg.Cluster.TLS; t != nil {
		if cc.TLS, err = cluster.LoadTLS(cluster.TLSFiles{CA: t.CAFile, Cert: t.CertFile, Key: t.KeyFile}); err != nil {
			return err
		}
	}
	cli, err := cluster.Open(cc, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
	defer cancel()
	published, err := cli.Statuses(ctx)
	if err != nil {
		return err
	}
	rows := cluster.Report(published, desired.Nodes(cfg), src.Hash())
	if asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			ConfigHash string        `json:"config_hash"`
			Nodes      []cluster.Row `json:"nodes"`
		}{src.Hash(), rows}); err != nil {
			return err
		}
	} else {
		cluster.WriteTable(cmd.OutOrStdout(), rows, src.Hash(), time.Now())
	}
	if n := cluster.Problems(rows); n > 0 {
		if !asJSON {
			fmt.Fprintf(cmd.OutOrStdout(), "\n%d node(s) flagged\n", n)
		}
		return exitError{code: 2}
	}
	return nil
}
