# The smallest useful sos.hcl: two sites, one agent each, one whitelist.
# Every value not written here takes its default.

controller {
  node = "ctl"
}

security {
  psk_file = "/etc/sosappliance/psk"
}

site "east" {
  prefixes = ["192.0.2.0/25"]
  switch "sw-east" {
    datapath_id = "00:00:00:00:00:00:00:0a"
  }
  agent "agent-east" {
    node        = "agent-east"
    switch      = "sw-east"
    switch_port = 1
    mac         = "02:00:00:00:0a:01"
    address     = "192.0.2.2"
    interface   = "eth0"
  }
}

site "west" {
  prefixes = ["192.0.2.128/25"]
  switch "sw-west" {
    datapath_id = "00:00:00:00:00:00:00:0b"
  }
  agent "agent-west" {
    node        = "agent-west"
    switch      = "sw-west"
    switch_port = 1
    mac         = "02:00:00:00:0b:01"
    address     = "192.0.2.130"
    interface   = "eth0"
  }
}

whitelist "bulk" {
  clients      = ["192.0.2.0/25"]
  server       = "192.0.2.200"
  server_ports = ["5201-5204"] # iperf3 servers on four ports
}
