# Two agents per site: every whitelisted connection is dealt to one agent
# at each end by bits of the client's TCP port (spread mode "port", which
# needs masked tcp_src/tcp_dst matches, as Open vSwitch has). When one agent
# of a site is down its share moves to the other; only when both are down
# does the site fail open.

controller {
  node = "ctl"
}

security {
  psk_file = "/etc/sosappliance/psk"
}

spread {
  mode = "port" # or "address": plain OpenFlow 1.3, even only across many clients
  bits = 4      # 16 buckets; the default is 8 per agent of the largest site, at least 16
}

site "east" {
  prefixes = ["192.0.2.0/25"]
  switch "sw-east" {
    datapath_id = "00:00:00:00:00:00:00:0a"
  }
  agent "east-1" {
    node        = "east-1"
    switch      = "sw-east"
    switch_port = 1
    mac         = "02:00:00:00:0a:01"
    address     = "192.0.2.2"
    interface   = "eth0"
  }
  agent "east-2" {
    node        = "east-2"
    switch      = "sw-east"
    switch_port = 2
    mac         = "02:00:00:00:0a:02"
    address     = "192.0.2.3"
    interface   = "eth0"
  }
}

site "west" {
  prefixes = ["192.0.2.128/25"]
  switch "sw-west" {
    datapath_id = "00:00:00:00:00:00:00:0b"
  }
  agent "west-1" {
    node        = "west-1"
    switch      = "sw-west"
    switch_port = 1
    mac         = "02:00:00:00:0b:01"
    address     = "192.0.2.130"
    interface   = "eth0"
  }
  agent "west-2" {
    node        = "west-2"
    switch      = "sw-west"
    switch_port = 2
    mac         = "02:00:00:00:0b:02"
    address     = "192.0.2.131"
    interface   = "eth0"
  }
}

# Uses every agent of both sites.
whitelist "bulk" {
  clients      = ["192.0.2.0/26"]
  server       = "192.0.2.200"
  server_ports = ["5201-5204"]
}

# Carried by east-2 and west-1 only.
whitelist "pinned" {
  clients       = ["192.0.2.64/26"]
  server        = "192.0.2.201"
  server_port   = 2811
  client_agents = ["east-2"]
  server_agents = ["west-1"]
}
