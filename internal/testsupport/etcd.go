package testsupport

import (
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Etcd is a real etcd cluster (the Debian etcd-server package) of one or
// more members on loopback, with data in the test's temp dir. Members can
// be killed and started again to cut the appliance off from etcd.
type Etcd struct {
	t       testing.TB
	netns   string
	members []*etcdMember
	mu      sync.Mutex
	// tlsArgs are the members' TLS flags, and health the client that
	// checks them (StartEtcdTLS); none for plain http.
	tlsArgs []string
	health  *http.Client
}

type etcdMember struct {
	name, dir, client, peer string
	cluster                 string
	proc                    *Daemon
	started                 bool
}

// StartEtcd starts an etcd cluster of n members and waits until it is
// healthy. Without the etcd binary it skips, or fails under CI=true.
func StartEtcd(t testing.TB, n int) *Etcd {
	t.Helper()
	return StartEtcdInNetns(t, n, "")
}

// StartEtcdInNetns is StartEtcd inside the named network namespace (one
// that already exists, e.g. an Open vSwitch test instance's, whose
// loopback the daemons under test use); "" is this one.
func StartEtcdInNetns(t testing.TB, n int, netns string) *Etcd {
	t.Helper()
	return startEtcd(t, &Etcd{t: t, netns: netns, health: &http.Client{Timeout: time.Second}}, n, "http")
}

// StartEtcdTLS is StartEtcd with TLS on the client port: each member
// presents a certificate server issued for 127.0.0.1 and requires a
// client certificate that a CA of the PEM bundle trustedCAFile signed
// (server's CA among them: the health checks present one of its).
func StartEtcdTLS(t testing.TB, n int, server *PKI, trustedCAFile string) *Etcd {
	t.Helper()
	cert, key, _ := server.Issue(t, "etcd-member")
	_, _, health := server.Issue(t, "etcd-health")
	conf := server.ClientTLS(health)
	e := &Etcd{t: t, tlsArgs: []string{"--cert-file", cert, "--key-file", key, "--client-cert-auth", "--trusted-ca-file", trustedCAFile},
		health: &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: conf}}}
	return startEtcd(t, e, n, "https")
}

func startEtcd(t testing.TB, e *Etcd, n int, scheme string) *Etcd {
	t.Helper()
	RequireBinaries(t, "etcd", "etcdctl")
	ports := FreePorts(t, 2*n)
	var cluster []string
	dir := t.TempDir()
	for i := range n {
		m := &etcdMember{name: fmt.Sprintf("m%d", i), dir: filepath.Join(dir, fmt.Sprintf("m%d", i)),
			client: fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[2*i]), peer: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])}
		cluster = append(cluster, m.name+"="+m.peer)
		e.members = append(e.members, m)
	}
	for _, m := range e.members {
		m.cluster = strings.Join(cluster, ",")
		e.startMember(m, "new")
	}
	e.WaitHealthy()
	return e
}

func (e *Etcd) startMember(m *etcdMember, state string) {
	e.t.Helper()
	cmd := e.command("etcd", "--name", m.name, "--data-dir", m.dir,
		"--listen-client-urls", m.client, "--advertise-client-urls", m.client,
		"--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
		"--initial-cluster", m.cluster, "--initial-cluster-state", state,
		"--initial-cluster-token", "sos-test", "--log-level", "warn", "--logger", "zap")
	cmd.Args = append(cmd.Args, e.tlsArgs...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	m.proc = StartDaemon(e.t, cmd)
	m.started = true
}

func (e *Etcd) command(name string, args ...string) *exec.Cmd {
	if e.netns == "" {
		return exec.Command(name, args...)
	}
	return exec.Command("ip", append([]string{"netns", "exec", e.netns, name}, args...)...)
}

// Endpoints are the client URLs of every member.
func (e *Etcd) Endpoints() []string {
	var out []string
	for _, m := range e.members {
		out = append(out, m.client)
	}
	return out
}

// Kill kills every member at once (SIGKILL): etcd is unreachable.
func (e *Etcd) Kill() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range e.members {
		if m.started {
			m.proc.Kill()
			m.started = false
		}
	}
}

// Restart starts the killed members again on their data and waits until
// the cluster is healthy.
func (e *Etcd) Restart() {
	e.t.Helper()
	e.mu.Lock()
	for _, m := range e.members {
		if !m.started {
			e.startMember(m, "existing")
		}
	}
	e.mu.Unlock()
	e.WaitHealthy()
}

// WaitHealthy waits until every member answers /health with a leader.
func (e *Etcd) WaitHealthy() {
	e.t.Helper()
	c := e.health
	Eventually(e.t, 30*time.Second, "etcd to be healthy", func() bool {
		if e.netns != "" {
			return e.command("etcdctl", "--endpoints", strings.Join(e.Endpoints(), ","), "--command-timeout", "1s",
				"endpoint", "health").Run() == nil
		}
		for _, m := range e.members {
			resp, err := c.Get(m.client + "/health")
			if err != nil {
				return false
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false
			}
		}
		return true
	})
}
