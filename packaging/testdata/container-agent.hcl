# The deployment the container tests install: the container (hostname
# sos-agent) is the near site's agent on its veth end host0; the controller
# and the far agent are nodes that do not exist, and none is needed for the
# agent's host state and relay listeners to come up. Addresses are in
# 10.203.0.0/16, used only inside the container's network namespace.

controller {
  node = "sos-controller"
}

security {
  psk_file = "/etc/sosappliance/psk"
}

daemon {
  log_format     = "json"
  drift_interval = "1h" # only a reload corrects drift during the test
}

site "near" {
  prefixes = ["10.203.1.0/24"]
  switch "sw-near" {
    datapath_id = "00:00:00:00:00:00:00:01"
  }
  agent "agent-near" {
    node        = "sos-agent"
    switch      = "sw-near"
    switch_port = 1
    mac         = "02:00:00:00:01:02"
    address     = "10.203.1.2"
    interface   = "host0"
    tuning      = ["agent"]
  }
}

site "far" {
  prefixes = ["10.203.2.0/24"]
  switch "sw-far" {
    datapath_id = "00:00:00:00:00:00:00:02"
  }
  agent "agent-far" {
    node        = "sos-far"
    switch      = "sw-far"
    switch_port = 1
    mac         = "02:00:00:00:02:02"
    address     = "10.203.2.2"
    interface   = "eth1"
  }
}

whitelist "bulk" {
  clients     = ["10.203.1.0/24"]
  server      = "10.203.2.1"
  server_port = 5201
}

# Sysctls of the network namespace only (the container cannot write the
# others), and interface settings without irq_cpus (a veth has no IRQs).
tuning "agent" {
  sysctl = {
    "net.core.somaxconn"       = "8192"
    "net.ipv4.tcp_mtu_probing" = "1"
  }
  interface "host0" {
    mtu        = 9000
    txqueuelen = 10000
  }
  relay_cpus = "0"
}
