// Package cluster is the appliance's use of etcd: the controllers elect the
// one that is OpenFlow master with etcd's election API, and every node
// publishes its status under a lease so that any node can show the whole
// deployment. Nothing here is consensus of our own: etcd decides, and a
// lease that expires is how a node cut off from it loses what it held.
package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sosappliance/sosappliance/internal/filetrust"
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
	TLS *TLS
	// Node is this node's name: the election value and the status key.
	Node string
	// GenerationBase is added to the election's revisions to make the
	// role generations (see config.Cluster).
	GenerationBase uint64
}

func (c Config) tlsConfig() *tls.Config {
	if c.TLS == nil {
		return nil
	}
	return c.TLS.Config()
}

func (c Config) ttlSeconds() int {
	return max(2, int(c.LeaseTTL/time.Second))
}

// Keys of a deployment under its prefix.
func (c Config) electionKey() string       { return c.Prefix + "election" }
func (c Config) statusKey(n string) string { return c.Prefix + "status/" + n }
func (c Config) statusPrefix() string      { return c.Prefix + "status/" }

// TLSFiles are the PEM files of TLS to etcd: the CA that signs the
// members' certificates, and this node's client certificate and key.
type TLSFiles struct {
	CA, Cert, Key string
}

// TLS is the client side of TLS to etcd, from files whose certificate
// and key may be replaced while the client runs (certificate rotation):
// a fresh LoadTLS of the same files reads them again, Take puts its
// certificate in force here, and every connection made from then on (etcd
// clients reconnect to a member that restarted or failed over) presents
// the new certificate. Connections already up keep the one they were made
// with: TLS checks a certificate only in its handshake. The CA is fixed
// for the life of a TLS: crypto/tls verifies the member's certificate
// against it and the name dialed, and a replaced CA needs a new client
// (see SameCA).
type TLS struct {
	files TLSFiles
	roots *x509.CertPool
	// cas are the DER of the CA certificates, sorted: SameCA compares
	// them, not the file's bytes (a comment or another order is the
	// same CA).
	cas [][]byte
	cur atomic.Pointer[tlsCert]
}

type tlsCert struct {
	cert tls.Certificate
	// certPEM and keyPEM are the files' bytes, to tell a reload that
	// changed them.
	certPEM, keyPEM []byte
}

// LoadTLS reads files.
func LoadTLS(files TLSFiles) (*TLS, error) {
	_, blocks, err := readPEM(files.CA)
	if err != nil {
		return nil, err
	}
	t := &TLS{files: files, roots: x509.NewCertPool()}
	for _, b := range blocks {
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("etcd tls: %s: %w", files.CA, err)
		}
		t.roots.AddCert(c)
		t.cas = append(t.cas, b.Bytes)
	}
	if len(t.cas) == 0 {
		return nil, fmt.Errorf("etcd tls: %s holds no PEM certificate", files.CA)
	}
	slices.SortFunc(t.cas, bytes.Compare)
	t.cas = slices.CompactFunc(t.cas, bytes.Equal)
	c, err := loadCert(files)
	if err != nil {
		return nil, err
	}
	t.cur.Store(c)
	return t, nil
}

// readPEM reads the PEM blocks of a file and refuses one that begins a
// block it does not finish: a file written in place and read half-written
// (pem.Decode would skip the block it cut) is not taken for a shorter
// chain or bundle. Text around the blocks (comments) is allowed.
func readPEM(path string) ([]byte, []*pem.Block, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("etcd tls: %w", err)
	}
	var blocks []*pem.Block
	rest := data
	for {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		blocks = append(blocks, b)
	}
	if bytes.Contains(rest, []byte("-----BEGIN")) {
		return nil, nil, fmt.Errorf("etcd tls: %s has a PEM block cut short after its %d whole one(s): read while it was written? (replace such files by renaming a complete copy over them)", path, len(blocks))
	}
	return data, blocks, nil
}

func loadCert(f TLSFiles) (*tlsCert, error) {
	c := &tlsCert{}
	var err error
	if c.certPEM, _, err = readPEM(f.Cert); err != nil {
		return nil, err
	}
	if err := filetrust.CheckSecret("etcd tls key_file", f.Key); err != nil {
		return nil, err
	}
	if c.keyPEM, err = os.ReadFile(f.Key); err != nil {
		return nil, fmt.Errorf("etcd tls: %w", err)
	}
	if c.cert, err = tls.X509KeyPair(c.certPEM, c.keyPEM); err != nil {
		return nil, fmt.Errorf("etcd tls: %s and %s: %w", f.Cert, f.Key, err)
	}
	return c, nil
}

// Files are the files t reads.
func (t *TLS) Files() TLSFiles { return t.files }

// SameCA says whether o read the same CA certificates as t, from the
// same files: then t can take o's certificate (Take); otherwise the
// client must be made again.
func (t *TLS) SameCA(o *TLS) bool {
	return t.files == o.files && slices.EqualFunc(t.cas, o.cas, bytes.Equal)
}

// Take puts the certificate o read (a reload's fresh read of the same
// files, SameCA) in force, and reports whether it differs.
func (t *TLS) Take(o *TLS) bool { return t.put(o.cur.Load()) }

func (t *TLS) put(c *tlsCert) bool {
	old := t.cur.Load()
	if bytes.Equal(old.certPEM, c.certPEM) && bytes.Equal(old.keyPEM, c.keyPEM) {
		return false
	}
	t.cur.Store(c)
	return true
}

// Config is the tls.Config of the etcd client: the CA as RootCAs, and the
// client certificate in force looked up at each handshake.
func (t *TLS) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    t.roots,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c := t.cur.Load().cert
			return &c, nil
		},
	}
}

// Client is a connection to etcd. It does not wait for etcd on Open: a node
// starts while etcd is down and joins when it comes back.
type Client struct {
	cfg Config
	cli *clientv3.Client
	log *slog.Logger
	// longTTL says once that etcd grants longer leases (grantLease).
	longTTL sync.Once
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
		TLS:         cfg.tlsConfig(),
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

// grantLease asks etcd for a lease of the configured TTL within the
// request timeout. The client holds a request until it has a connection,
// so without the bound an etcd that cannot be reached, or that refuses
// this client's certificate, was a wait without end and nothing said
// why. A longer TTL than the file's (etcd raises a TTL below its election
// timeout) is said once: the failover takes that long.
func (c *Client) grantLease(ctx context.Context) (*clientv3.LeaseGrantResponse, error) {
	gctx, cancel := context.WithTimeout(ctx, c.requestTimeout())
	defer cancel()
	want := int64(c.cfg.ttlSeconds())
	g, err := c.cli.Grant(gctx, want)
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = c.why(fmt.Errorf("no etcd of %s answered a lease request within %s (down, unreachable, or refusing this node's TLS certificate or CA: see the etcd log): %w",
				strings.Join(c.cfg.Endpoints, ", "), c.requestTimeout(), err))
		}
		return nil, err
	}
	if g.TTL > want {
		c.longTTL.Do(func() {
			c.log.Warn("etcd granted a longer lease than lease_ttl; a failover takes that long (etcd raises a TTL below its election timeout)",
				"lease_ttl", c.cfg.LeaseTTL, "granted", time.Duration(g.TTL)*time.Second)
		})
	}
	return g, nil
}

// why adds to a request that timed out what a TLS handshake with each
// https endpoint says, if it fails: the etcd client only waits for a
// connection, so a member that refuses this node's certificate, or whose
// own this node's CA does not sign, was "context deadline exceeded".
func (c *Client) why(err error) error {
	if !errors.Is(err, context.DeadlineExceeded) || c.cfg.TLS == nil {
		return err
	}
	for _, ep := range c.cfg.Endpoints {
		u, perr := url.Parse(ep)
		if perr != nil || u.Scheme != "https" {
			continue
		}
		if herr := c.handshake(u.Host); herr != nil {
			return fmt.Errorf("%w (TLS with %s: %v)", err, u.Host, herr)
		}
	}
	return err
}

// handshake makes a TLS connection to host as the client does, and reads
// once, shortly, for the alert a server sends when it refuses the
// client's certificate (in TLS 1.3, after the client's side is done).
func (c *Client) handshake(host string) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.requestTimeout())
	defer cancel()
	cfg := c.cfg.tlsConfig().Clone()
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(host)
	}
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		return err
	}
	return nil
}

// Ping reads one key to tell whether etcd answers now.
func (c *Client) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout())
	defer cancel()
	_, err := c.cli.Get(ctx, c.cfg.electionKey(), clientv3.WithCountOnly())
	return err
}
