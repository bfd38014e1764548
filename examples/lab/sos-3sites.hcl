# The three-site lab (`lab up --sites 3`, examples/lab): the two sites of
# sos.hcl and a third, all on the emulated WAN: each site's WAN leg runs
# through its own emulator into one hub, so any two sites are one lab RTT
# apart. The third host (10.10.3.10) sits behind agent-c on br-c. There is
# a whitelist from each site to the next, and the e2e test runs one
# transfer across each pair.
#
# Each lab run works on a copy of this file in its own directory, as with
# sos.hcl.

controller {
  node      = "lab-ctl"
  listen    = "127.0.0.1:6653"
  keepalive = "1s"
  # Probes to agent-b cross the emulated WAN and its full queue during a
  # transfer; be patient before withdrawing steering.
  health_interval = "3s"
}

security {
  psk_file   = "/tmp/sosappliance-lab/psk"
  encryption = "aes-256-gcm"
}

daemon {
  state_path     = "/tmp/sosappliance-lab/state.db"
  control_socket = "/tmp/sosappliance-lab/control.sock"
  metrics_listen = ""
  drift_interval = "5s"
}

site "a" {
  prefixes = ["10.10.1.0/24"]
  switch "br-a" {
    datapath_id = "00:00:00:00:00:00:0a:01"
  }
  agent "agent-a" {
    node        = "lab-agent-a"
    switch      = "br-a"
    switch_port = 2
    mac         = "02:5a:00:00:01:02"
    address     = "10.10.1.2"
    interface   = "eth0"
    tuning      = ["lab-agent"]
  }
}

site "b" {
  prefixes = ["10.10.2.0/24"]
  switch "br-b" {
    datapath_id = "00:00:00:00:00:00:0b:01"
  }
  agent "agent-b" {
    node        = "lab-agent-b"
    switch      = "br-b"
    switch_port = 2
    mac         = "02:5a:00:00:02:02"
    address     = "10.10.2.2"
    interface   = "eth0"
    tuning      = ["lab-agent"]
  }
}

site "c" {
  prefixes = ["10.10.3.0/24"]
  switch "br-c" {
    datapath_id = "00:00:00:00:00:00:0c:01"
  }
  agent "agent-c" {
    node        = "lab-agent-c"
    switch      = "br-c"
    switch_port = 2
    mac         = "02:5a:00:00:03:02"
    address     = "10.10.3.2"
    interface   = "eth0"
    tuning      = ["lab-agent"]
  }
}

# One whitelist per pair of sites, each with its own port range.
whitelist "a-to-b" {
  clients      = ["10.10.1.0/24"]
  servers      = ["10.10.2.10"]
  server_ports = ["5201", "8080"]
  streams      = 16
}

whitelist "b-to-c" {
  clients      = ["10.10.2.0/24"]
  servers      = ["10.10.3.10"]
  server_ports = ["8080"]
  streams      = 16
}

whitelist "c-to-a" {
  clients      = ["10.10.3.0/24"]
  servers      = ["10.10.1.10"]
  server_ports = ["8080"]
  streams      = 16
}

# Agents get WAN-sized TCP buffers and BBR on their stripe streams, which
# random loss does not throttle the way it throttles loss-based congestion
# control; client and server stay untuned. The net.core buffer maxima are
# left out: inside a network namespace they are read-only mirrors of the
# machine's.
tuning "lab-agent" {
  congestion_control = "bbr"
  sysctl = {
    "net.ipv4.tcp_rmem"        = "4096 87380 33554432"
    "net.ipv4.tcp_wmem"        = "4096 65536 33554432"
    "net.ipv4.tcp_mtu_probing" = "1"
  }
}
