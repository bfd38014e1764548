package packaging

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

const unitName = PackageName + ".service"

// The agent's host state as testdata/container-agent.hcl sets it.
const (
	agentAddress    = "10.203.1.2"
	agentSteerRule  = `iifname "host0" ip saddr @clients0 ip daddr @servers0 tcp dport @ports0 tcp flags syn / fin,syn,rst,ack meta mark set 0x0000534f tproxy to :9876 accept`
	agentPolicyRule = "fwmark 0x534f lookup 21327 proto 83"
	relayListen     = "0.0.0.0:9876"
	// steeringTable is tuning.SteeringTable, spelled out here so that the
	// packaging tests do not import the daemon's packages.
	steeringTable = "sosappliance"
	dataListen    = agentAddress + ":9877"
)

// serviceCaps is CapabilityBoundingSet= of the unit as /proc shows it:
// CAP_NET_BIND_SERVICE (10), CAP_NET_ADMIN (12), CAP_NET_RAW (13),
// CAP_SYS_NICE (23).
const serviceCaps = "0000000000803400"

// testWatchdog is the WatchdogSec= the test sets to see the watchdog
// restart a stopped daemon, as systemd writes it.
const testWatchdog = "10s"

var statusLine = regexp.MustCompile(`^serial ([0-9]+), 0 session\(s\), config ([0-9a-f]{12})$`)

// TestSystemdUnitInContainer installs the .deb into a Debian container with
// systemd as PID 1 and runs the service as an operator would: the node is
// an agent on a veth, so tuning, steering and the relay all run under the
// unit's hardening. It checks start through Type=notify, the host state,
// the sandbox the daemon runs in, reload, the journal, the watchdog and
// what stop leaves behind.
//
// What this cannot check here: irq_cpus and non-network sysctls (the
// container's /proc/irq and /proc/sys outside net are read-only, and a veth
// has no IRQs); the seccomp-based options one by one (SystemCallFilter,
// RestrictAddressFamilies, MemoryDenyWriteExecute, LockPersonality,
// RestrictNamespaces, RestrictSUIDSGID, SystemCallArchitectures, the
// syscall half of ProtectClock): only that a filter is installed and that
// the daemon works under it; ProtectControlGroups, ProtectKernelModules and
// ProtectKernelLogs, whose paths nspawn already hides or mounts read-only;
// LimitNOFILE above the host's own hard limit, which caps the container's.
func TestSystemdUnitInContainer(t *testing.T) {
	_, pkgs := builtPackages(t)
	deb := hostPackage(t, pkgs, "deb")
	c := bootContainer(t, "sosu")

	t.Logf("dpkg --install:\n%s", c.run(t, "dpkg", "--install", c.copyIn(t, deb, "/root")))
	shipped := c.unit(t, unitName, "Type", "Restart", "UnitFileState")
	if want := map[string]string{"Type": "notify", "Restart": "on-failure", "UnitFileState": "disabled"}; !maps.Equal(shipped, want) {
		t.Errorf("installed unit: %v, want %v", shipped, want)
	}

	before := agentHostState(t, c)
	cfg := makeAgent(t, c)

	// Start: with Type=notify, systemctl start returns once the daemon has
	// sent READY=1, and the status line is the one it sent with it.
	c.run(t, "systemctl", "start", unitName)
	st := c.unit(t, unitName, "ActiveState", "SubState", "StatusText", "MainPID", "WatchdogUSec")
	if st["ActiveState"] != "active" || st["SubState"] != "running" || st["WatchdogUSec"] != "30s" {
		t.Fatalf("after systemctl start: %v", st)
	}
	checkStatusLine(t, st["StatusText"], cfg)
	mainPID := st["MainPID"]

	state := agentHostState(t, c)
	want := agentState{Somaxconn: "8192", MTUProbing: "1", MTU: "9000", TxQueueLen: "10000", Table: true, Rule: true, Listeners: true}
	if state != want {
		t.Errorf("agent host state after start: %+v, want %+v", state, want)
	}
	var status struct {
		Node   string   `json:"node"`
		Roles  []string `json:"roles"`
		Agents []struct {
			Name  string `json:"name"`
			Local bool   `json:"local"`
		} `json:"agents"`
	}
	if err := json.Unmarshal([]byte(c.run(t, BinaryPath, "status", "--json")), &status); err != nil {
		t.Fatalf("status --json: %v", err)
	}
	if status.Node != containerHostname || !slices.Equal(status.Roles, []string{"agent:agent-near"}) || len(status.Agents) != 1 || !status.Agents[0].Local {
		t.Errorf("status over the control socket: %+v", status)
	}
	checkSandbox(t, c, mainPID)

	// The journal holds the daemon's JSON lines with its unit's fields.
	j := journal(t, c)
	for _, want := range []struct{ msg, key, value string }{
		{"starting", "node", containerHostname},
		{"applied", "key", "nftables"},
		{"applied", "key", "host0/mtu"},
		{"relay started", "transparent", relayListen},
		{"ready", "node", containerHostname},
	} {
		if !j.has(want.msg, want.key, want.value) {
			t.Errorf("journal lacks msg=%q with %s=%q", want.msg, want.key, want.value)
		}
	}
	if len(j.unstructured) > 0 {
		t.Errorf("daemon lines in the journal that are not JSON: %q", j.unstructured)
	}

	// An edit plus systemctl reload applies. The daemon's file watcher may
	// see the edit first; either way the new value must arrive.
	edited := strings.Replace(string(cfg), `"8192"`, `"16384"`, 1)
	writeFile(t, c.path(ConfigPath), []byte(edited), 0o644)
	c.run(t, "systemctl", "reload", unitName)
	testsupport.Eventually(t, time.Minute, "edited sysctl applied after reload", func() bool {
		return c.sysctl(t, "net.core.somaxconn") == "16384"
	})
	testsupport.Eventually(t, time.Minute, "status line names the edited config", func() bool {
		st := c.unit(t, unitName, "ActiveState", "StatusText")
		m := statusLine.FindStringSubmatch(st["StatusText"])
		return st["ActiveState"] == "active" && m != nil && m[2] == configHash([]byte(edited))
	})
	// Reload without an edit reaches the daemon too: it converges again,
	// correcting what changed behind its back (drift_interval is an hour,
	// so nothing else would).
	c.run(t, "sysctl", "-w", "net.ipv4.tcp_mtu_probing=0")
	c.run(t, "systemctl", "reload", unitName)
	testsupport.Eventually(t, time.Minute, "reload corrected the drifted sysctl", func() bool {
		return c.sysctl(t, "net.ipv4.tcp_mtu_probing") == "1"
	})
	testsupport.Eventually(t, time.Minute, "journal records the reloads", func() bool {
		j := journal(t, c)
		return j.has("reload requested by SIGHUP", "node", containerHostname) &&
			j.has("reloaded", "node", containerHostname) &&
			j.has("drift corrected", "key", "net.ipv4.tcp_mtu_probing")
	})

	// The watchdog: a stopped process sends no pings; systemd kills it and
	// Restart=on-failure brings it back (after RestartSec=5s) to READY.
	// The shipped interval is 30 s; testWatchdog keeps the test shorter,
	// and still gives a daemon on a loaded machine time for its pings
	// (every half interval). The restart is counted from NRestarts before
	// the stop, so a restart the watchdog made earlier, or makes again of
	// a daemon starved after it came back, does not fail the test.
	dropIn := c.path("/etc/systemd/system/" + unitName + ".d")
	if err := os.MkdirAll(dropIn, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dropIn, "watchdog.conf"), []byte("[Service]\nWatchdogSec="+testWatchdog+"\n"), 0o644)
	c.run(t, "systemctl", "daemon-reload")
	c.run(t, "systemctl", "restart", unitName)
	st = c.unit(t, unitName, "ActiveState", "MainPID", "WatchdogUSec", "NRestarts")
	if st["ActiveState"] != "active" || st["WatchdogUSec"] != testWatchdog {
		t.Fatalf("after restart with a %s watchdog: %v", testWatchdog, st)
	}
	mainPID = st["MainPID"]
	restarts, err := strconv.Atoi(st["NRestarts"])
	if err != nil {
		t.Fatalf("NRestarts after restart: %v", err)
	}
	c.run(t, "kill", "-STOP", mainPID)
	testsupport.Eventually(t, 2*time.Minute, "watchdog restarted the stopped daemon", func() bool {
		st := c.unit(t, unitName, "ActiveState", "SubState", "MainPID", "NRestarts")
		n, err := strconv.Atoi(st["NRestarts"])
		return st["ActiveState"] == "active" && st["SubState"] == "running" && err == nil && n > restarts &&
			st["MainPID"] != mainPID && st["MainPID"] != "0"
	})
	testsupport.Eventually(t, time.Minute, "journal records the watchdog", func() bool {
		j := journal(t, c)
		return j.aborted() && j.hasSystemd(unitName+": Failed with result 'watchdog'.")
	})

	// Stop: the relays go; the host state stays as it is (a restart picks
	// up where it left off) until `sosappliance rollback` puts it back.
	c.run(t, "systemctl", "stop", unitName)
	if st := c.unit(t, unitName, "ActiveState", "Result"); st["ActiveState"] != "inactive" || st["Result"] != "success" {
		t.Errorf("after systemctl stop: %v", st)
	}
	want.Somaxconn, want.Listeners = "16384", false
	if got := agentHostState(t, c); got != want {
		t.Errorf("host state after stop: %+v, want %+v", got, want)
	}
	testsupport.Eventually(t, time.Minute, "journal records the stop", func() bool {
		j := journal(t, c)
		return j.has("stopping", "node", containerHostname) && j.has("relay stopped", "agent", "agent-near")
	})
	c.run(t, BinaryPath, "rollback", "--auto-approve")
	if got := agentHostState(t, c); got != before {
		t.Errorf("host state after rollback: %+v, want what it was before the start: %+v", got, before)
	}
}

// makeAgent gives the container's node its role: the agent address on
// host0 and the agent deployment as sos.hcl, which must validate there.
func makeAgent(t *testing.T, c *container) []byte {
	t.Helper()
	c.run(t, "ip", "address", "add", agentAddress+"/24", "dev", "host0")
	c.run(t, "ip", "link", "set", "host0", "up")
	cfg := readFile(t, "testdata/container-agent.hcl")
	writeFile(t, c.path(ConfigPath), cfg, 0o644)
	c.run(t, BinaryPath, "validate", "-c", ConfigPath)
	return cfg
}

func hostPackage(t *testing.T, pkgs []builtPackage, format string) string {
	t.Helper()
	for _, p := range pkgs {
		if p.format == format && p.arch == runtime.GOARCH {
			return p.path
		}
	}
	testsupport.Require(t, false, "no %s package is built for this machine's architecture %s", format, runtime.GOARCH)
	return ""
}

// agentState is what the agent's role changes in the container.
type agentState struct {
	Somaxconn, MTUProbing, MTU, TxQueueLen string
	Table, Rule, Listeners                 bool
}

func agentHostState(t *testing.T, c *container) agentState {
	t.Helper()
	s := agentState{
		Somaxconn:  c.sysctl(t, "net.core.somaxconn"),
		MTUProbing: c.sysctl(t, "net.ipv4.tcp_mtu_probing"),
		MTU:        strings.TrimSpace(c.run(t, "cat", "/sys/class/net/host0/mtu")),
		TxQueueLen: strings.TrimSpace(c.run(t, "cat", "/sys/class/net/host0/tx_queue_len")),
		Rule:       strings.Contains(c.run(t, "ip", "rule", "show"), agentPolicyRule),
	}
	if out, err := c.exec("nft", "list", "table", "ip", steeringTable); err == nil {
		s.Table = strings.Contains(out, agentSteerRule)
		if !s.Table {
			t.Logf("nft list table ip %s:\n%s", steeringTable, out)
		}
	}
	var listening []string
	for _, line := range strings.Split(c.run(t, "ss", "-Hltn"), "\n") {
		if f := strings.Fields(line); len(f) >= 4 {
			listening = append(listening, f[3])
		}
	}
	relay, data := slices.Contains(listening, relayListen), slices.Contains(listening, dataListen)
	if relay != data {
		t.Errorf("only one of the relay's listeners is up: %q", listening)
	}
	s.Listeners = relay && data
	return s
}

func (c *container) sysctl(t *testing.T, name string) string {
	t.Helper()
	return strings.TrimSpace(c.run(t, "sysctl", "-n", name))
}

func checkStatusLine(t *testing.T, line string, cfg []byte) {
	t.Helper()
	m := statusLine.FindStringSubmatch(line)
	if m == nil {
		t.Errorf("status line %q does not match %v", line, statusLine)
		return
	}
	if serial, _ := strconv.Atoi(m[1]); serial < 1 {
		t.Errorf("status line %q: no state applied", line)
	}
	if m[2] != configHash(cfg) {
		t.Errorf("status line %q names config %s, want %s", line, m[2], configHash(cfg))
	}
}

func configHash(cfg []byte) string {
	sum := sha256.Sum256(cfg)
	return hex.EncodeToString(sum[:])[:12]
}

// checkSandbox checks, on the running daemon, the hardening of the unit
// that shows from outside the process.
func checkSandbox(t *testing.T, c *container, pid string) {
	t.Helper()
	proc := "/proc/" + pid
	status := map[string]string{}
	for _, line := range strings.Split(c.run(t, "cat", proc+"/status"), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			status[k] = strings.TrimSpace(v)
		}
	}
	for _, want := range []struct{ option, field, value string }{
		{"CapabilityBoundingSet", "CapBnd", serviceCaps},
		{"CapabilityBoundingSet", "CapEff", serviceCaps},
		{"NoNewPrivileges", "NoNewPrivs", "1"},
		{"SystemCallFilter", "Seccomp", "2"},
		{"UMask", "Umask", "0077"},
	} {
		if got := status[want.field]; got != want.value {
			t.Errorf("%s: %s is %q, want %q", want.option, want.field, got, want.value)
		}
	}

	// LimitNOFILE=1048576, or the hard limit systemd itself got from the
	// host if that is lower (the container cannot raise it).
	nofile := func(limits string) (soft, hard string) {
		for _, line := range strings.Split(limits, "\n") {
			if f := strings.Fields(line); strings.HasPrefix(line, "Max open files") && len(f) >= 5 {
				return f[3], f[4]
			}
		}
		return "", ""
	}
	_, hardCap := nofile(c.run(t, "cat", "/proc/1/limits"))
	want := "1048576"
	if n, err := strconv.Atoi(hardCap); err == nil && n < 1048576 {
		want = hardCap
		t.Logf("LimitNOFILE: the host caps open files at %d, below the unit's 1048576", n)
	}
	if soft, hard := nofile(c.run(t, "cat", proc+"/limits")); soft != want || hard != want {
		t.Errorf("LimitNOFILE: open files %s/%s, want %s", soft, hard, want)
	}

	// The file system as the daemon sees it.
	mounts := map[string]string{} // mount point: options
	for _, line := range strings.Split(c.run(t, "cat", proc+"/mountinfo"), "\n") {
		if f := strings.Fields(line); len(f) > 5 {
			mounts[f[4]] = f[5]
		}
	}
	ro := func(opts string) bool { return slices.Contains(strings.Split(opts, ","), "ro") }
	for _, want := range []struct {
		option, path string
		readOnly     bool
	}{
		{"ProtectSystem=strict", "/", true},
		{"ProtectHome", "/home", true},
		{"ProtectHome", "/root", true},
		{"StateDirectory", StateDir, false},
		{"RuntimeDirectory", "/run/sosappliance", false},
		{"PrivateTmp", "/tmp", false},
		{"PrivateDevices", "/dev", true},
	} {
		opts, ok := mounts[want.path]
		if !ok || ro(opts) != want.readOnly {
			t.Errorf("%s: %s mounted %v (%q), want read-only %v", want.option, want.path, ok, opts, want.readOnly)
		}
	}
	if out := c.run(t, "ls", proc+"/root/dev"); strings.Contains(out, "net") {
		t.Errorf("PrivateDevices: the daemon sees the container's /dev/net:\n%s", out)
	}
	if !strings.Contains(c.run(t, "ls", "/dev"), "net") {
		t.Log("PrivateDevices: the container has no /dev/net to hide, so the check above proves little")
	}
	if c.run(t, "readlink", proc+"/ns/uts") == c.run(t, "readlink", "/proc/1/ns/uts") {
		t.Error("ProtectHostname: the daemon shares systemd's UTS namespace")
	}
	for path, mode := range map[string]string{StateDir: "750", "/run/sosappliance": "700", "/run/sosappliance/control.sock": "600"} {
		if got := strings.TrimSpace(c.run(t, "stat", "-c", "%a", path)); got != mode {
			t.Errorf("%s has mode %s, want %s", path, got, mode)
		}
	}
}

// journalLog is the service's journal: the daemon's JSON lines decoded,
// and systemd's messages about the unit.
type journalLog struct {
	daemon       []map[string]any
	systemd      []string
	unstructured []string
}

func journal(t *testing.T, c *container) journalLog {
	t.Helper()
	var j journalLog
	out := c.run(t, "journalctl", "--unit="+unitName, "--output=json", "--no-pager")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var entry struct {
			Message    any    `json:"MESSAGE"`
			Identifier string `json:"SYSLOG_IDENTIFIER"`
			Unit       string `json:"_SYSTEMD_UNIT"`
		}
		if line == "" || json.Unmarshal([]byte(line), &entry) != nil {
			continue
		}
		msg, _ := entry.Message.(string) // journald sends non-UTF-8 messages as byte arrays
		switch entry.Identifier {
		case "systemd":
			j.systemd = append(j.systemd, msg)
		case PackageName:
			var rec map[string]any
			if entry.Unit != unitName || json.Unmarshal([]byte(msg), &rec) != nil {
				// After the watchdog's SIGABRT the Go runtime writes its
				// goroutine dump: text, and expected.
				if !j.aborted() {
					j.unstructured = append(j.unstructured, msg)
				}
				continue
			}
			for _, key := range []string{"time", "level", "msg", "node"} {
				if _, ok := rec[key]; !ok {
					j.unstructured = append(j.unstructured, msg)
				}
			}
			j.daemon = append(j.daemon, rec)
		}
	}
	return j
}

// aborted says whether systemd killed the daemon for the test's watchdog.
func (j journalLog) aborted() bool {
	return j.hasSystemd(unitName + ": Watchdog timeout (limit " + testWatchdog + ")!")
}

func (j journalLog) has(msg, key, value string) bool {
	for _, rec := range j.daemon {
		if rec["msg"] == msg && fmt.Sprint(rec[key]) == value {
			return true
		}
	}
	return false
}

func (j journalLog) hasSystemd(msg string) bool { return slices.Contains(j.systemd, msg) }
