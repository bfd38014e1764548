# Three dual-stack sites on one research network, an agent at each, and
# whitelists between every pair. IPv4 and IPv6 hosts of a pair take one
# whitelist each: a TCP connection has one address family.

controller {
  node = "ctl-clemson"
}

security {
  psk_file = "/etc/sosappliance/psk"
}

site "clemson" {
  prefixes = ["10.10.1.0/24", "2001:db8:10:1::/64"]
  switch "sw-clemson" {
    datapath_id = "00:00:00:00:00:00:00:01"
  }
  agent "agent-clemson" {
    node        = "agent-clemson"
    switch      = "sw-clemson"
    switch_port = 3
    mac         = "02:00:00:00:01:02"
    address     = "2001:db8:10:1::2" # agents reach each other over IPv6
    interface   = "eth1"
  }
}

site "utah" {
  prefixes = ["10.10.2.0/24", "2001:db8:10:2::/64"]
  switch "sw-utah" {
    datapath_id = "00:00:00:00:00:00:00:02"
  }
  agent "agent-utah" {
    node        = "agent-utah"
    switch      = "sw-utah"
    switch_port = 3
    mac         = "02:00:00:00:02:02"
    address     = "2001:db8:10:2::2"
    interface   = "eth1"
  }
}

site "chicago" {
  prefixes = ["10.10.3.0/24", "2001:db8:10:3::/64"]
  switch "sw-chicago" {
    datapath_id = "00:00:00:00:00:00:00:03"
  }
  agent "agent-chicago" {
    node        = "agent-chicago"
    switch      = "sw-chicago"
    switch_port = 3
    mac         = "02:00:00:00:03:02"
    address     = "2001:db8:10:3::2"
    interface   = "eth1"
  }
}

# Clemson's data-transfer nodes fetch from Utah's over IPv6: GridFTP's
# control port and data range, in both directions (mode E downloads are
# opened by the sender).
whitelist "clemson-utah-v6" {
  clients      = ["2001:db8:10:1::/64"]
  servers      = ["2001:db8:10:2::100/124"]
  server_ports = ["2811", "50000-51000"]
  direction    = "both"
}

# The same pair over IPv4.
whitelist "clemson-utah-v4" {
  clients      = ["10.10.1.0/24"]
  servers      = ["10.10.2.96/28"]
  server_ports = ["2811", "50000-51000"]
  direction    = "both"
}

# Utah pushes to Chicago's iperf3 servers.
whitelist "utah-chicago" {
  clients      = ["10.10.2.0/24"]
  server       = "10.10.3.10"
  server_ports = ["5201-5204"]
}

# Chicago reads Clemson's web archive.
whitelist "chicago-clemson" {
  clients     = ["2001:db8:10:3::/64"]
  servers     = ["2001:db8:10:1::80"]
  server_port = 443
}
