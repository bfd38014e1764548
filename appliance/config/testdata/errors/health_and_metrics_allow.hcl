# Allow lists of the health and metrics ports: prefixes, not empty, and an
# agent's must admit the controller on its own node.
controller {
  node   = "n-a"
  listen = "127.0.0.1:6653"
}
security {
  psk_file = "/etc/sosappliance/psk"
}
daemon {
  metrics_allow = ["192.0.2.0/33"] # ERROR: daemon metrics_allow
}
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "sw-a" {
    datapath_id = "00:00:00:00:00:00:00:01"
  }
  agent "on-the-controller-node" {
    node         = "n-a"
    switch       = "sw-a"
    switch_port  = 2
    mac          = "02:00:00:00:01:02"
    address      = "10.1.0.2"
    interface    = "eth0"
    health_allow = ["192.0.2.10/32"] # ERROR: does not admit 10.1.0.2, where the controller on its node "n-a" probes it from
  }
  agent "empty" {
    node         = "n-b"
    switch       = "sw-a"
    switch_port  = 3
    mac          = "02:00:00:00:01:03"
    address      = "10.1.0.3"
    interface    = "eth0"
    health_allow = [] # ERROR: agent "empty" health_allow is empty
  }
  agent "host-bits" {
    node         = "n-c"
    switch       = "sw-a"
    switch_port  = 4
    mac          = "02:00:00:00:01:04"
    address      = "10.1.0.4"
    interface    = "eth0"
    health_allow = ["192.0.2.1/24"] # ERROR: has host bits set
  }
  agent "fine" {
    node         = "n-d"
    switch       = "sw-a"
    switch_port  = 5
    mac          = "02:00:00:00:01:05"
    address      = "10.1.0.5"
    interface    = "eth0"
    health_allow = ["192.0.2.10", "2001:db8::/64"]
  }
}
