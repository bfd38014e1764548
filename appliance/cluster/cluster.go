// Package cluster is the appliance's use of etcd: the controllers elect the
// one that is OpenFlow master with etcd's election API, and every node
// publishes its status under a lease so that any node can show the whole
// deployment. Nothing here is consensus of our own: etcd decides, and a
// lease that expires is how a node cut off from it loses what it held.
package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Config says where etcd is and how this node uses it.
type Config struct {
	// Endpoints are etcd client URLs.
	Endpoints []string
	// Prefix is the key prefix of the deployment, ending in "/".
	Prefix string
	// LeaseTTL is the lease of the election and of the status entry, in
	// whole seconds (at least 2 s).
	LeaseTTL time.Duration
	// DialTimeout bounds connecting; default 3 s.
	DialTimeout time.Duration
	// TLS is the client side of TLS to etcd; nil for plain http.
	TLS *tls.Config
	// Node is this node's name: the election value and the status key.
	Node string
	// GenerationBase is added to the election's revisions to make the
	// role generations (see config.Cluster).
	GenerationBase uint64
}

func (c Config) ttlSeconds() int {
	return max(2, int(c.LeaseTTL/time.Second))
}

// Keys of a deployment under its prefix.
func (c Config) electionKey() string       { return c.Prefix + "election" }
func (c Config) statusKey(n string) string { return c.Prefix + "status/" + n }
func (c Config) statusPrefix() string      { return c.Prefix + "status/" }

// LoadTLS builds the TLS client configuration from PEM files.
func LoadTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("etcd tls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("etcd tls: %s holds no PEM certificate", caFile)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("etcd tls: %w", err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// Client is a connection to etcd. It does not wait for etcd on Open: a node
// starts while etcd is down and joins when it comes back.
type Client struct {
	cfg Config
	cli *clientv3.Client
	log *slog.Logger
}

// Open makes a client for cfg.
func Open(cfg Config, log *slog.Logger) (*Client, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("cluster: no etcd endpoints")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 3 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		TLS:         cfg.TLS,
		// Keepalives on the gRPC connection notice a dead member
		// within a lease TTL, so the lease keepalive moves on to
		// another one.
		DialKeepAliveTime:    cfg.LeaseTTL / 2,
		DialKeepAliveTimeout: cfg.LeaseTTL / 2,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: etcd client: %w", err)
	}
	return &Client{cfg: cfg, cli: cli, log: log}, nil
}

// Close ends the client; whatever it held under a lease expires with it.
func (c *Client) Close() error { return c.cli.Close() }

// Config is the configuration the client was opened with.
func (c *Client) Config() Config { return c.cfg }

// requestTimeout bounds one plain request (put, get).
func (c *Client) requestTimeout() time.Duration {
	return max(c.cfg.DialTimeout, time.Second)
}

// Ping reads one key to tell whether etcd answers now.
func (c *Client) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout())
	defer cancel()
	_, err := c.cli.Get(ctx, c.cfg.electionKey(), clientv3.WithCountOnly())
	return err
}
