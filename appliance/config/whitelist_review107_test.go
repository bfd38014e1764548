package config

// Written by review (helper-107): validate's answers to contradictory or impossible whitelists.
// Each must be refused with an error whose position names the whitelist's
// lines in the file.

import (
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

const r107Base = `security { psk_file = "/etc/psk" }
controller { node = "ctl" }
site "a" {
  prefixes = ["10.1.0.0/24", "fd01::/64"]
  switch "sw-a" { datapath_id = "0x1" }
  agent "ag-a" {
    node = "na"
    switch = "sw-a"
    switch_port = 3
    mac = "02:00:00:00:00:01"
    address = "10.1.0.2"
    interface = "eth1"
  }
}
site "b" {
  prefixes = ["10.2.0.0/24", "fd02::/64"]
  switch "sw-b" { datapath_id = "0x2" }
  agent "ag-b" {
    node = "nb"
    switch = "sw-b"
    switch_port = 7
    mac = "02:00:00:00:00:02"
    address = "10.2.0.2"
    interface = "eth1"
  }
}
`

// r107Errors parses base+extra and returns the error diagnostics, and the
// first line of extra in the file.
func r107Errors(t *testing.T, extra string) (hcl.Diagnostics, int) {
	t.Helper()
	src := r107Base + extra
	_, diags := Parse(Source{Filename: "r107.hcl", Bytes: []byte(src)})
	var errs hcl.Diagnostics
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			errs = append(errs, d)
		}
	}
	return errs, strings.Count(r107Base, "\n") + 1
}

func TestValidateImpossibleWhitelists(t *testing.T) {
	cases := []struct {
		name, wl string
		want     string // a word the error must contain
	}{
		{"port 0", `whitelist "w" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_port = 0
}`, "port"},
		{"port 0 in a list", `whitelist "w" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_ports = ["0"]
}`, "port"},
		{"range from 0", `whitelist "w" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_ports = ["0-10"]
}`, "port"},
		{"port above 65535", `whitelist "w" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_ports = ["70000"]
}`, "port"},
		{"reversed range", `whitelist "w" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_ports = ["51000-50000"]
}`, "range"},
		{"duplicate entries", `whitelist "w1" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_port = 5201
}
whitelist "w2" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_port = 5201
}`, "overlaps"},
		{"differ only in chunk size and streams", `whitelist "w1" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_port = 5201
  chunk_size = 60000
  streams = 8
}
whitelist "w2" {
  clients = ["10.1.0.0/25"]
  server = "10.2.0.10"
  server_ports = ["5200-5202"]
  chunk_size = 10000
  streams = 16
}`, "overlaps"},
		{"same name twice", `whitelist "w" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_port = 5201
}
whitelist "w" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.11"
  server_port = 5201
}`, "w"},
		{"IPv4 clients, IPv6 server", `whitelist "w" {
  clients = ["10.1.0.0/24"]
  server = "fd02::10"
  server_port = 5201
}`, "famil"},
		{"IPv4-mapped IPv6 server", `whitelist "w" {
  clients = ["10.1.0.0/24"]
  server = "::ffff:10.2.0.10"
  server_port = 5201
}`, ""},
		{"server in the client site", `whitelist "w" {
  clients = ["10.1.0.0/25"]
  server = "10.1.0.200"
  server_port = 5201
}`, "same site"},
		{"server in no site", `whitelist "w" {
  clients = ["10.1.0.0/24"]
  server = "10.3.0.10"
  server_port = 5201
}`, "no site"},
		{"clients wider than their site", `whitelist "w" {
  clients = ["10.0.0.0/8"]
  server = "10.2.0.10"
  server_port = 5201
}`, ""},
		{"both directions overlapping a reverse whitelist", `whitelist "w1" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_port = 2811
  direction = "both"
}
whitelist "w2" {
  clients = ["10.2.0.10/32"]
  server = "10.1.0.5"
  server_port = 2811
}`, "overlaps"},
		// A client network or server listed twice, or one inside
		// another: validate accepted them, and the controller could not
		// install the flows ("need the same flow entry").
		{"a client network twice", `whitelist "w" {
  clients = ["10.1.0.0/24", "10.1.0.0/24"]
  server = "10.2.0.10"
  server_port = 5201
}`, "overlaps"},
		{"a server network twice", `whitelist "w" {
  clients = ["10.1.0.0/24"]
  servers = ["10.2.0.16/28", "10.2.0.16/28"]
  server_port = 5201
}`, "overlaps"},
		{"a server network inside another", `whitelist "w" {
  clients = ["10.1.0.0/24"]
  servers = ["10.2.0.16/28", "10.2.0.16/29"]
  server_port = 5201
}`, "overlaps"},
		{"a port twice", `whitelist "w" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_ports = ["5201", "5201"]
}`, "overlaps"},
		{"a port range inside another", `whitelist "w" {
  clients = ["10.1.0.0/24"]
  server = "10.2.0.10"
  server_ports = ["50000-50063", "50032-50047"]
}`, "overlaps"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs, first := r107Errors(t, c.wl)
			if len(errs) == 0 {
				t.Errorf("validate accepts it")
				return
			}
			last := first + strings.Count(c.wl, "\n")
			var ok bool
			for _, d := range errs {
				text := d.Summary + " " + d.Detail
				at := d.Subject != nil && d.Subject.Filename == "r107.hcl" && d.Subject.Start.Line >= first && d.Subject.Start.Line <= last
				t.Logf("%s: %s", r107Pos(d), d.Summary)
				if at && strings.Contains(strings.ToLower(text), strings.ToLower(c.want)) {
					ok = true
				}
			}
			if !ok {
				t.Errorf("no error mentioning %q at a line of the whitelist (%d-%d)", c.want, first, last)
			}
		})
	}
}

func r107Pos(d *hcl.Diagnostic) string {
	if d.Subject == nil {
		return "(no position)"
	}
	return d.Subject.String()
}
