# Two controllers, one per site, electing which of them programs the
# switches on a three-member etcd. Each switch connects to both:
#   ovs-vsctl set-controller br0 tcp:192.0.2.1:6653 tcp:192.0.2.129:6653
# The elected one is OpenFlow master, the other slave; every node (agents
# too) publishes its status there, so `sosappliance status --cluster`
# shows the whole deployment. Otherwise as minimal.hcl.

controller {
  node   = "ctl-east"
  listen = "192.0.2.1:6653"
}

controller {
  node   = "ctl-west"
  listen = "192.0.2.129:6653"
}

cluster {
  etcd      = ["http://192.0.2.10:2379", "http://192.0.2.11:2379", "http://192.0.2.140:2379"]
  lease_ttl = "5s" # a master cut off from etcd steps down after this; a takeover waits for it
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
  servers      = ["192.0.2.192/28"]
  server_ports = ["5201-5204"]
}
