package labnet

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/zclconf/go-cty/cty"
)

// With Options.Controllers = 2 the lab runs a second controller (one per
// site, both beside the switches in the lab) and a three-member etcd in the
// switch namespace; both bridges connect to both controllers, which elect
// the OpenFlow master on that etcd.

// etcdMembers is the size of the lab's etcd cluster.
const etcdMembers = 3

// etcdBasePort is the first of the members' client and peer ports in the
// switch namespace: client 23790+2i on the controller's lab address, which
// the agents reach too (every node publishes its status), peer 23791+2i on
// loopback.
const etcdBasePort = 23790

// SecondController names the lab's second controller node.
const SecondController = "lab-ctl-b"

func etcdClientURL(i int) string {
	return fmt.Sprintf("http://%s:%d", ControllerAddr, etcdBasePort+2*i)
}
func etcdPeerURL(i int) string { return fmt.Sprintf("http://127.0.0.1:%d", etcdBasePort+2*i+1) }

// EtcdEndpoints are the client URLs of the lab's etcd members.
func EtcdEndpoints() []string {
	var out []string
	for i := range etcdMembers {
		out = append(out, etcdClientURL(i))
	}
	return out
}

// addHA writes the second controller block and the cluster block into the
// lab's copy of the config.
func (c *ConfigFile) addHA(first string) error {
	body := c.file.Body()
	ctl := body.FirstMatchingBlock("controller", nil)
	if ctl == nil {
		return fmt.Errorf("the lab needs a controller block")
	}
	host, port, err := net.SplitHostPort(first)
	if err != nil {
		return fmt.Errorf("controller listen %q: %w", first, err)
	}
	p, _ := strconv.Atoi(port)
	body.AppendNewline()
	second := body.AppendNewBlock("controller", nil)
	for name, attr := range ctl.Body().Attributes() {
		second.Body().SetAttributeRaw(name, attr.Expr().BuildTokens(nil))
	}
	second.Body().SetAttributeValue("node", cty.StringVal(SecondController))
	second.Body().SetAttributeValue("listen", cty.StringVal(net.JoinHostPort(host, strconv.Itoa(p+1))))
	body.AppendNewline()
	cl := body.AppendNewBlock("cluster", nil)
	var eps []cty.Value
	for _, ep := range EtcdEndpoints() {
		eps = append(eps, cty.StringVal(ep))
	}
	cl.Body().SetAttributeValue("etcd", cty.ListVal(eps))
	cl.Body().SetAttributeValue("lease_ttl", cty.StringVal("3s"))
	return nil
}

// startEtcd runs the three etcd members in the switch namespace, data in
// the lab's directory, and waits until the cluster answers.
func (l *Lab) startEtcd(ctx context.Context) error {
	var cluster []string
	for i := range etcdMembers {
		cluster = append(cluster, fmt.Sprintf("m%d=%s", i, etcdPeerURL(i)))
	}
	for i := range etcdMembers {
		name := fmt.Sprintf("m%d", i)
		if _, err := l.start("etcd-"+name, SwitchHost, nil, "etcd", "--name", name,
			"--data-dir", filepath.Join(l.Dir, "etcd-"+name),
			"--listen-client-urls", etcdClientURL(i), "--advertise-client-urls", etcdClientURL(i),
			"--listen-peer-urls", etcdPeerURL(i), "--initial-advertise-peer-urls", etcdPeerURL(i),
			"--initial-cluster", strings.Join(cluster, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "sos-lab-"+l.ID, "--log-level", "warn", "--logger", "zap"); err != nil {
			return err
		}
	}
	return poll(ctx, 60*time.Second, "etcd", func() (bool, error) {
		_, err := l.Run(ctx, SwitchHost, "etcdctl", "--endpoints", strings.Join(EtcdEndpoints(), ","),
			"--command-timeout", "2s", "endpoint", "health")
		return err == nil, nil
	})
}

// KillEtcd kills every etcd member with SIGKILL: etcd is unreachable for
// every node of the lab.
func (l *Lab) KillEtcd() error {
	for i := range etcdMembers {
		p := l.Process(fmt.Sprintf("etcd-m%d", i))
		if p == nil {
			return fmt.Errorf("etcd member m%d is not running", i)
		}
		if err := p.Kill(); err != nil {
			return err
		}
	}
	return nil
}
