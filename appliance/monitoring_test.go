package appliance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// The dashboard and the alerting rules both packages install under
// /usr/share/sosappliance.
const (
	dashboardFile = "../packaging/files/grafana-dashboard.json"
	alertsFile    = "../packaging/files/prometheus-alerts.yml"
)

// prometheusOwn are series that Prometheus makes itself for every target
// rather than scraping them, and targetLabels the labels it adds to every
// scraped series.
var (
	prometheusOwn = []string{"up"}
	targetLabels  = []string{"job", "instance"}
)

// agentOnly are series only a node with a local agent exports, which the
// controller node TestDashboardAndAlertsUseExportedMetrics scrapes does
// not run; TestReloadTakesPSKReplacedInPlace scrapes them from an agent's
// node.
var agentOnly = []string{"sosappliance_psk_info"}

// monitoringConfig is a controller node on loopback with a switch that
// never connects and agents whose health port nobody serves: the daemon
// exports every series of both roles' metrics without root or Open vSwitch.
func monitoringConfig(controllerPort, healthPort int) string {
	return fmt.Sprintf(`
controller {
  node            = "ctl"
  listen          = "127.0.0.1:%d"
  health_interval = "300ms"
}
security { psk_file = "/etc/sosappliance/psk" }
site "a" {
  prefixes = ["10.20.1.0/24"]
  switch "sw" { datapath_id = "00:00:00:00:00:00:5a:01" }
  agent "agent-a" {
    node          = "na"
    switch        = "sw"
    switch_port   = 2
    mac           = "02:00:00:00:5a:02"
    address       = "10.20.1.2"
    interface     = "eth0"
    health_listen = "127.0.0.1:%d"
  }
}
site "b" {
  prefixes = ["10.20.2.0/24"]
  switch "swb" { datapath_id = "00:00:00:00:00:00:5b:01" }
  agent "agent-b" {
    node          = "nb"
    switch        = "swb"
    switch_port   = 2
    mac           = "02:00:00:00:5b:02"
    address       = "10.20.2.2"
    interface     = "eth0"
    health_listen = "127.0.0.1:%d"
  }
}
whitelist "w" {
  clients     = ["10.20.1.0/24"]
  server      = "10.20.2.10"
  server_port = 5201
}
`, controllerPort, healthPort, healthPort)
}

// freePort is a loopback port reserved for the test (testsupport.FreePorts).
func freePort(t *testing.T) int {
	t.Helper()
	return testsupport.FreePorts(t, 1)[0]
}

// TestDashboardAndAlertsUseExportedMetrics scrapes a freshly started
// controller daemon and checks that every series the shipped dashboard and
// alerting rules select exists in it, label values of their equality
// matchers included: a dashboard panel or an alert over a misspelt or
// never-exported series shows nothing and never fires, without an error.
func TestDashboardAndAlertsUseExportedMetrics(t *testing.T) {
	root, dir := tempHost(t), t.TempDir()
	cfgPath := filepath.Join(dir, "sos.hcl")
	writeFile(t, cfgPath, monitoringConfig(freePort(t), freePort(t)))
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	td := startDaemonWith(t, root, dir, cfgPath, daemonParams{node: "ctl", metrics: addr})
	td.waitFor("controller running", func() bool {
		st, err := FetchStatus(context.Background(), td.socket)
		return err == nil && len(st.Switches) == 2
	})

	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	scraped := parseScrape(string(body))

	used := map[string][]selector{}
	for _, expr := range dashboardExprs(t) {
		sels, err := promqlSelectors(expr)
		if err != nil {
			t.Errorf("dashboard expression %q: %v", expr, err)
		}
		used["dashboard"] = append(used["dashboard"], sels...)
	}
	for _, expr := range alertExprs(t) {
		sels, err := promqlSelectors(expr)
		if err != nil {
			t.Errorf("alert expression %q: %v", expr, err)
		}
		used["alerts"] = append(used["alerts"], sels...)
	}
	for _, file := range []string{"dashboard", "alerts"} {
		if len(used[file]) == 0 {
			t.Errorf("no metric found in the %s", file)
		}
		for _, sel := range used[file] {
			if slices.Contains(prometheusOwn, sel.name) || slices.Contains(agentOnly, sel.name) {
				continue
			}
			if msg := scraped.lacks(sel); msg != "" {
				t.Errorf("%s: %s", file, msg)
			}
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", body)
	}
}

// TestAlertRulesPassPromtool runs Prometheus's own checker on the rules and
// their unit tests in testdata, which feed series to each alert and say
// when it must fire.
func TestAlertRulesPassPromtool(t *testing.T) {
	testsupport.RequireBinaries(t, "promtool")
	for _, args := range [][]string{
		{"check", "rules", alertsFile},
		{"test", "rules", "testdata/prometheus-alerts-test.yml"},
	} {
		out, err := exec.Command("promtool", args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// dashboardExprs returns every PromQL expression of the dashboard: its
// panels' targets, rows' nested panels included, and the first argument of
// its label_values template queries.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	labelValues := regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_]\w*\)$`)
	var out []string
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				walk(x, k)
			}
		case []any:
			for _, x := range v {
				walk(x, key)
			}
		case string:
			switch {
			case key == "expr":
				out = append(out, v)
			case key == "query" || key == "definition":
				if m := labelValues.FindStringSubmatch(v); m != nil {
					out = append(out, m[1])
				}
			}
		}
	}
	walk(dash, "")
	return out
}

func alertExprs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var out []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out = append(out, r.Expr)
		}
	}
	return out
}

// scrape is the series of one scrape: metric name to label sets.
type scrape map[string][]map[string]string

func parseScrape(text string) scrape {
	s := scrape{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		labels := map[string]string{}
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name, rest = line[:i], line[i:]
			end := strings.LastIndexByte(rest, '}')
			for _, m := range matcherPattern.FindAllStringSubmatch(rest[1:end], -1) {
				labels[m[1]] = m[3]
			}
		}
		s[name] = append(s[name], labels)
	}
	return s
}

// lacks says what of sel the scrape does not have, or "".
func (s scrape) lacks(sel selector) string {
	series, ok := s[sel.name]
	if !ok {
		return fmt.Sprintf("metric %s is not exported", sel.name)
	}
	for _, labels := range series {
		match := true
		for k, v := range sel.equal {
			if !slices.Contains(targetLabels, k) && labels[k] != v {
				match = false
			}
		}
		if match {
			return ""
		}
	}
	return fmt.Sprintf("no series of %s has labels %v", sel.name, sel.equal)
}

// selector is a metric name and the label values an expression asks of it
// with =.
type selector struct {
	name  string
	equal map[string]string
}

var (
	identPattern   = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)
	matcherPattern = regexp.MustCompile(`([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	// PromQL words that are not metric names, and those of them that take
	// a list of labels in parentheses.
	promqlKeywords = []string{"and", "or", "unless", "bool", "offset", "inf", "nan", "start", "end",
		// Aggregations, which may have their by or without before "(".
		"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
	labelListWords = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}
)

// promqlSelectors finds the metric names of a PromQL expression (with
// Grafana's $variables in it) by a small lexer: strings, label matchers and
// ranges are skipped, an identifier before "(" is a function or an
// aggregation, and the label lists of by, without, on, ignoring and the
// group modifiers are not metrics.
func promqlSelectors(expr string) ([]selector, error) {
	var out []selector
	i := 0
	for i < len(expr) {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(expr, i)
			if err != nil {
				return out, err
			}
			i = end
		case c == '{' || c == '[':
			end, err := skipGroup(expr, i)
			if err != nil {
				return out, err
			}
			i = end
		case c == '$': // a Grafana variable
			i++
			i += len(identPattern.FindString(expr[i:]))
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isWordByte(expr[i]) || expr[i] == '.') {
				i++
			}
		case identPattern.MatchString(expr[i:]):
			word := identPattern.FindString(expr[i:])
			i += len(word)
			next := strings.TrimLeft(expr[i:], " \t\n\r")
			switch {
			case slices.Contains(labelListWords, word):
				if strings.HasPrefix(next, "(") {
					start := len(expr) - len(next)
					end := strings.IndexByte(expr[start:], ')')
					if end < 0 {
						return out, fmt.Errorf("unclosed label list after %s", word)
					}
					i = start + end + 1
				}
			case slices.Contains(promqlKeywords, strings.ToLower(word)):
			case strings.HasPrefix(next, "("): // function or aggregation
			default:
				sel := selector{name: word, equal: map[string]string{}}
				if strings.HasPrefix(next, "{") {
					start := len(expr) - len(next)
					end, err := skipGroup(expr, start)
					if err != nil {
						return out, err
					}
					for _, m := range matcherPattern.FindAllStringSubmatch(expr[start+1:end-1], -1) {
						if m[2] == "=" && !strings.Contains(m[3], "$") {
							sel.equal[m[1]] = m[3]
						}
					}
					i = end
				}
				out = append(out, sel)
			}
		default:
			i++
		}
	}
	return out, nil
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// skipString returns the index just past the string literal at i.
func skipString(expr string, i int) (int, error) {
	quote := expr[i]
	for j := i + 1; j < len(expr); j++ {
		switch {
		case expr[j] == '\\' && quote != '`':
			j++
		case expr[j] == quote:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unclosed string at %d", i)
}

// skipGroup returns the index just past the {...} or [...] opened at i,
// reading the strings inside it as strings.
func skipGroup(expr string, i int) (int, error) {
	closer := map[byte]byte{'{': '}', '[': ']'}[expr[i]]
	for j := i + 1; j < len(expr); j++ {
		switch expr[j] {
		case '"', '\'', '`':
			end, err := skipString(expr, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case closer:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unclosed %c at %d", expr[i], i)
}

func TestPromQLSelectors(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`up{job="sosappliance"} == 0`, []string{`up{job=sosappliance}`}},
		{`count(count by (sha256) (sosappliance_config_info{job="$job"})) > 1`, []string{`sosappliance_config_info{}`}},
		{`sum by (instance, kind) (increase(sosappliance_drift_corrections_total{job="$job",instance=~"$instance"}[$__rate_interval])) > 3`,
			[]string{`sosappliance_drift_corrections_total{}`}},
		{"a{kind=\"reserved\"}\n / ignoring (kind) (b{kind=\"limit\"} > 0) > 0.9", []string{`a{kind=reserved}`, `b{kind=limit}`}},
		{`rate(x[5m] offset 1h) * 8 and on (instance) y{l="}"}`, []string{`x{}`, `y{l=}}`}},
		{`sum(rate(x[$__rate_interval])) by (le)`, []string{`x{}`}},
	} {
		sels, err := promqlSelectors(c.expr)
		if err != nil {
			t.Errorf("%q: %v", c.expr, err)
			continue
		}
		var got []string
		for _, s := range sels {
			var labels []string
			for k, v := range s.equal {
				labels = append(labels, k+"="+v)
			}
			slices.Sort(labels)
			got = append(got, s.name+"{"+strings.Join(labels, ",")+"}")
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: got %v, want %v", c.expr, got, c.want)
		}
	}
}
