package labnet

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"

	"github.com/sosappliance/sosappliance/appliance"
	"github.com/sosappliance/sosappliance/appliance/config"
)

// ConfigFile is the lab's copy of sos.hcl opened for editing. Edits keep
// the file's comments and layout.
type ConfigFile struct {
	file *hclwrite.File
}

// Body is the top level of the file, for edits the helpers do not cover.
func (c *ConfigFile) Body() *hclwrite.Body { return c.file.Body() }

// Whitelist is a whitelist block as the lab writes one.
type Whitelist struct {
	Name       string
	Clients    []string
	Server     string
	ServerPort int
	// ServerPorts, when set, is written as server_ports instead of
	// ServerPort ("5700-5731" for a range); Direction as direction.
	ServerPorts []string
	Direction   string

	// ClientAgents and ServerAgents name a subset of the sites' agents;
	// empty uses them all.
	ClientAgents []string
	ServerAgents []string

	Streams     int
	ChunkSize   int
	QueueLength int
	// AutoStreams writes streams = "auto" with Streams as max_streams.
	AutoStreams bool
}

// SetWhitelist adds the whitelist, or replaces the one of the same name.
func (c *ConfigFile) SetWhitelist(w Whitelist) {
	body := c.file.Body()
	if old := body.FirstMatchingBlock("whitelist", []string{w.Name}); old != nil {
		body.RemoveBlock(old)
	}
	body.AppendNewline()
	b := body.AppendNewBlock("whitelist", []string{w.Name}).Body()
	clients := make([]cty.Value, len(w.Clients))
	for i, p := range w.Clients {
		clients[i] = cty.StringVal(p)
	}
	b.SetAttributeValue("clients", cty.ListVal(clients))
	b.SetAttributeValue("server", cty.StringVal(w.Server))
	if len(w.ServerPorts) > 0 {
		ports := make([]cty.Value, len(w.ServerPorts))
		for i, p := range w.ServerPorts {
			ports[i] = cty.StringVal(p)
		}
		b.SetAttributeValue("server_ports", cty.ListVal(ports))
	} else {
		b.SetAttributeValue("server_port", cty.NumberIntVal(int64(w.ServerPort)))
	}
	if w.Direction != "" {
		b.SetAttributeValue("direction", cty.StringVal(w.Direction))
	}
	counts := []struct {
		name string
		v    int
	}{{"streams", w.Streams}, {"chunk_size", w.ChunkSize}, {"queue_length", w.QueueLength}}
	if w.AutoStreams {
		b.SetAttributeValue("streams", cty.StringVal("auto"))
		counts[0].name = "max_streams"
	}
	for _, a := range counts {
		if a.v > 0 {
			b.SetAttributeValue(a.name, cty.NumberIntVal(int64(a.v)))
		}
	}
	for _, a := range []struct {
		name   string
		agents []string
	}{{"client_agents", w.ClientAgents}, {"server_agents", w.ServerAgents}} {
		if len(a.agents) > 0 {
			vals := make([]cty.Value, len(a.agents))
			for i, n := range a.agents {
				vals[i] = cty.StringVal(n)
			}
			b.SetAttributeValue(a.name, cty.ListVal(vals))
		}
	}
}

// RemoveWhitelist deletes the named whitelist and reports whether it was
// there.
func (c *ConfigFile) RemoveWhitelist(name string) bool {
	body := c.file.Body()
	if b := body.FirstMatchingBlock("whitelist", []string{name}); b != nil {
		return body.RemoveBlock(b)
	}
	return false
}

// setPaths moves every file the appliance reads or writes into dir, so labs
// never share a key, a state database or a control socket.
func (c *ConfigFile) setPaths(dir string) {
	body := c.file.Body()
	sec := body.FirstMatchingBlock("security", nil)
	if sec == nil {
		sec = body.AppendNewBlock("security", nil)
	}
	sec.Body().SetAttributeValue("psk_file", cty.StringVal(filepath.Join(dir, "psk")))
	d := body.FirstMatchingBlock("daemon", nil)
	if d == nil {
		d = body.AppendNewBlock("daemon", nil)
	}
	d.Body().SetAttributeValue("state_path", cty.StringVal(filepath.Join(dir, "state.db")))
	d.Body().SetAttributeValue("control_socket", cty.StringVal(filepath.Join(dir, "control.sock")))
	d.Body().SetAttributeValue("metrics_listen", cty.StringVal(""))
}

// setAgentKeys gives every agent of the file a key of its own (per-agent
// keys), its private key in dir, as an operator does with `sosappliance
// keygen` on each agent's node.
func (c *ConfigFile) setAgentKeys(dir string) error {
	for _, sb := range c.file.Body().Blocks() {
		if sb.Type() != "site" {
			continue
		}
		for _, ab := range sb.Body().Blocks() {
			if ab.Type() != "agent" || len(ab.Labels()) != 1 {
				continue
			}
			path := filepath.Join(dir, ab.Labels()[0]+".key")
			pub, err := appliance.WriteAgentKey(path)
			if err != nil {
				return fmt.Errorf("agent %s: %w", ab.Labels()[0], err)
			}
			ab.Body().SetAttributeValue("public_key", cty.StringVal(pub))
			ab.Body().SetAttributeValue("key_file", cty.StringVal(path))
		}
	}
	return nil
}

func openConfig(path string) (*ConfigFile, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("lab config: %w", err)
	}
	f, diags := hclwrite.ParseConfig(src, path, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, fmt.Errorf("lab config: %w", diags)
	}
	return &ConfigFile{file: f}, nil
}

// check decodes and validates the edited file as the daemons will.
func (c *ConfigFile) check(name string) (*config.Config, error) {
	src := config.Source{Filename: name, Bytes: c.file.Bytes()}
	cfg, diags := config.Parse(src)
	if diags.HasErrors() {
		var b strings.Builder
		config.WriteDiagnostics(&b, diags, src.Bytes)
		return nil, fmt.Errorf("lab config after edit:\n%s", b.String())
	}
	return cfg, nil
}

// ConfigPath is the lab's copy of sos.hcl, the file the daemons run with
// and watch.
func (l *Lab) ConfigPath() string { return filepath.Join(l.Dir, "sos.hcl") }

// writeConfig makes the lab's copy of the config and its key.
func (l *Lab) writeConfig() error {
	cf, err := openConfig(l.opts.Config)
	if err != nil {
		return err
	}
	cf.setPaths(l.Dir)
	if l.opts.Controllers > 1 {
		first, err := cf.check(l.ConfigPath())
		if err != nil {
			return err
		}
		if len(first.Controllers) == 1 {
			if err := cf.addHA(first.Controller.Listen); err != nil {
				return fmt.Errorf("lab config: %w", err)
			}
		}
	}
	if l.opts.Agents > 1 {
		first, err := cf.check(l.ConfigPath())
		if err != nil {
			return err
		}
		if err := cf.addSecondAgents(first); err != nil {
			return fmt.Errorf("lab config: %w", err)
		}
	}
	if l.opts.EditConfig != nil {
		if err := l.opts.EditConfig(cf); err != nil {
			return fmt.Errorf("lab config: %w", err)
		}
	}
	if err := cf.setAgentKeys(l.Dir); err != nil {
		return fmt.Errorf("lab config: %w", err)
	}
	cfg, err := cf.check(l.ConfigPath())
	if err != nil {
		return err
	}
	sites, err := labSites(cfg)
	if err != nil {
		return err
	}
	l.cfg, l.sites = cfg, sites
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return err
	}
	if err := os.WriteFile(cfg.Security.PSKFile, []byte(hex.EncodeToString(key[:])+"\n"), 0o600); err != nil {
		return fmt.Errorf("psk: %w", err)
	}
	return writeAtomic(l.ConfigPath(), cf.file.Bytes())
}

// EditConfig changes the lab's config the way an operator would: the whole
// file replaced at once (write and rename), which the daemons notice and
// reload without a restart. The edit is validated before it is written.
func (l *Lab) EditConfig(edit func(*ConfigFile) error) error {
	cf, err := openConfig(l.ConfigPath())
	if err != nil {
		return err
	}
	if err := edit(cf); err != nil {
		return err
	}
	cfg, err := cf.check(l.ConfigPath())
	if err != nil {
		return err
	}
	if err := writeAtomic(l.ConfigPath(), cf.file.Bytes()); err != nil {
		return err
	}
	l.mu.Lock()
	l.cfg = cfg
	l.mu.Unlock()
	return nil
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Node is one sosappliance process of the lab.
type Node struct {
	Name string
	Host Host
	// Agent is the agent this node runs, nil for the controller.
	Agent *config.Agent
}

// Nodes are the lab's sosappliance processes: the controller, then the
// agents of site a and site b.
func (l *Lab) Nodes() []Node {
	l.mu.Lock()
	defer l.mu.Unlock()
	nodes := []Node{{Name: l.cfg.Controller.Node, Host: SwitchHost}}
	for _, s := range l.sites {
		nodes = append(nodes, Node{Name: s.agents[0].Node, Host: s.agentHosts[0], Agent: s.agents[0]})
	}
	// Further controllers and agents come last, so the first three stay
	// as they were.
	for _, c := range l.cfg.Controllers[1:] {
		nodes = append(nodes, Node{Name: c.Node, Host: SwitchHost})
	}
	for _, s := range l.sites {
		for j, ag := range s.agents[1:] {
			nodes = append(nodes, Node{Name: ag.Node, Host: s.agentHosts[j+1], Agent: ag})
		}
	}
	return nodes
}

func (l *Lab) node(name string) (Node, error) {
	for _, n := range l.Nodes() {
		if n.Name == name {
			return n, nil
		}
	}
	return Node{}, fmt.Errorf("no lab node %q", name)
}

// ControlSocket is where a node's daemon serves its status.
func (l *Lab) ControlSocket(node string) string { return filepath.Join(l.Dir, node+".sock") }

func (l *Lab) applianceStep() string {
	if !l.Appliance() {
		return "no appliance: the switches forward everything normally"
	}
	return "sosappliance: controller and agents with " + filepath.Base(l.opts.Config)
}

// startAppliance writes the lab's config and starts the controller and the
// agents, then waits until the switches are connected, the agents answer
// their health checks and the flows are in.
func (l *Lab) startAppliance(ctx context.Context) error {
	if !l.Appliance() {
		return nil
	}
	if l.cfg.Cluster != nil {
		if err := l.startEtcd(ctx); err != nil {
			return err
		}
	}
	for _, n := range l.Nodes() {
		if err := l.startNode(n); err != nil {
			return err
		}
	}
	return l.WaitAppliance(ctx, 90*time.Second)
}

func (l *Lab) startNode(n Node) error {
	_, err := l.start(n.Name, n.Host, nil, l.opts.Sosappliance, "run",
		"-c", l.ConfigPath(),
		"--node", n.Name,
		"--state", filepath.Join(l.Dir, n.Name+".db"),
		"--control-socket", l.ControlSocket(n.Name),
		"--metrics-listen=")
	return err
}

// StartNode starts a node's daemon again (after StopNode or KillNode).
func (l *Lab) StartNode(name string) error {
	n, err := l.node(name)
	if err != nil {
		return err
	}
	return l.startNode(n)
}

// StopNode stops a node's daemon with SIGTERM, as an operator would.
func (l *Lab) StopNode(name string) error {
	p := l.Process(name)
	if p == nil {
		return fmt.Errorf("node %s is not running", name)
	}
	return p.Stop(15 * time.Second)
}

// KillNode ends a node's daemon with SIGKILL, as a crash would: it gets no
// chance to clean up.
func (l *Lab) KillNode(name string) error {
	p := l.Process(name)
	if p == nil {
		return fmt.Errorf("node %s is not running", name)
	}
	return p.Kill()
}

// WaitAppliance waits until every bridge is connected to the controller,
// every whitelist is steered on both switches, and every agent answers its
// health check from the controller's side of the lab.
func (l *Lab) WaitAppliance(ctx context.Context, limit time.Duration) error {
	return poll(ctx, limit, "appliance", func() (bool, error) {
		for _, n := range l.Nodes() {
			p := l.Process(n.Name)
			if p == nil || !p.Ref.Alive() {
				return false, fmt.Errorf("%w: %s is not running", errGaveUp, n.Name)
			}
		}
		if ok, err := l.ovs.connected(ctx); !ok {
			return false, errors.Join(errors.New("switches not connected to the controller"), err)
		}
		steered, err := l.Steered(ctx)
		if err != nil {
			return false, err
		}
		for name, ok := range steered {
			if !ok {
				return false, fmt.Errorf("whitelist %s is not steered yet", name)
			}
		}
		for _, n := range l.Nodes() {
			if n.Agent == nil {
				continue
			}
			if err := l.AgentHealthy(ctx, n.Agent); err != nil {
				return false, err
			}
		}
		return true, nil
	})
}

// AgentHealthy asks an agent's health endpoint, from the controller's
// namespace, the way the controller does.
func (l *Lab) AgentHealthy(ctx context.Context, a *config.Agent) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := l.Dial(ctx, SwitchHost, "tcp", a.HealthListen)
	if err != nil {
		return fmt.Errorf("agent %s health: %w", a.Name, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	req := "GET /healthz HTTP/1.1\r\nHost: " + a.HealthListen + "\r\nConnection: close\r\n\r\n"
	if _, err := conn.Write([]byte(req)); err != nil {
		return fmt.Errorf("agent %s health: %w", a.Name, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return fmt.Errorf("agent %s health: %w", a.Name, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("agent %s health: %s", a.Name, resp.Status)
	}
	return nil
}

// Status runs `sosappliance status --json` against a node's daemon.
func (l *Lab) Status(ctx context.Context, node string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, l.opts.Sosappliance, "status", "--json",
		"-c", l.ConfigPath(), "--control-socket", l.ControlSocket(node))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("status of %s: %w: %s", node, err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

// errGaveUp marks a readiness failure that waiting will not fix.
var errGaveUp = errors.New("gave up")

// errNotEmpty is what renaming onto an existing lab directory returns.
var errNotEmpty = syscall.ENOTEMPTY

// Steered reports for each whitelist of the lab's config whether both
// switches carry its steering flows (see PortSteered).
func (l *Lab) Steered(ctx context.Context) (map[string]bool, error) {
	l.mu.Lock()
	cfg := l.cfg
	l.mu.Unlock()
	steered := map[string]bool{}
	for _, w := range cfg.Whitelists {
		// A range is steered by value/mask blocks; its first block
		// stands for it.
		m := w.Ports[0].Masks()[0]
		match := strconv.Itoa(int(m.Value))
		if !m.Exact() {
			match = fmt.Sprintf("%#x/%#x", m.Value, m.Mask)
		}
		ok, err := l.matchSteered(ctx, w.ClientSite, w.ServerSite, "tp_dst="+match, "tp_src="+match, w.ClientAgents, w.ServerAgents)
		if err != nil {
			return nil, err
		}
		steered[w.Name] = ok
	}
	return steered, nil
}

// PortSteered reports whether both switches steer TCP to the server's port
// to the agents: the client site's switch sends the requests to its agent,
// the server site's switch the replies to its agent. The controller
// withdraws these flows while an agent is down (fail-open) and when the
// port's whitelist is removed.
func (l *Lab) PortSteered(ctx context.Context, port int) (bool, error) {
	l.mu.Lock()
	client, server := l.sites[0].agents[0].Site, l.sites[1].agents[0].Site
	l.mu.Unlock()
	return l.matchSteered(ctx, client, server, "tp_dst="+strconv.Itoa(port), "tp_src="+strconv.Itoa(port), nil, nil)
}

// matchSteered reports whether the client site's switch steers request to
// its agents and the server site's switch steers reply to its agents. With
// clientAgents and serverAgents (a whitelist's) it must steer to each of
// them; without, to some agent of the site (after a fail-over the dead one
// has no flows left).
func (l *Lab) matchSteered(ctx context.Context, clientSite, serverSite, request, reply string, clientAgents, serverAgents []string) (bool, error) {
	l.mu.Lock()
	sites := l.sites
	l.mu.Unlock()
	for _, s := range sites {
		var match string
		var want []string
		switch s.agents[0].Site {
		case clientSite:
			match, want = request, clientAgents
		case serverSite:
			match, want = reply, serverAgents
		default:
			continue
		}
		dump, err := l.ovs.ofctl(ctx, "dump-flows", s.sw.Name)
		if err != nil {
			return false, err
		}
		n := 0
		for _, ag := range s.agents {
			if !hasSteering(dump, match, ag) {
				if slices.Contains(want, ag.Name) {
					return false, nil
				}
				continue
			}
			n++
		}
		if n == 0 {
			return false, nil
		}
	}
	return true, nil
}

// hasSteering finds a flow in an ovs-ofctl dump that matches on match
// (e.g. "tp_dst=5201", alone or beside a spread partition) and steers to
// the agent.
func hasSteering(dump, match string, agent *config.Agent) bool {
	action := "set_field:" + agent.MAC.String() + "->eth_dst"
	for _, line := range strings.Split(dump, "\n") {
		if (strings.Contains(line, match+" ") || strings.Contains(line, match+",")) && strings.Contains(line, action) {
			return true
		}
	}
	return false
}
