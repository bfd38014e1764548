# The one-machine lab (examples/lab): two sites joined by an emulated WAN.
# All hosts share 10.10.0.0/16 at layer 2, as the original SOS trial did over
# a VLAN-stitched path; each site owns a /24 of it. Every node runs in its own
# network namespace: the controller beside the two Open vSwitch bridges, each
# agent on port 2 of its site's bridge. The client (10.10.1.10) and the
# server (10.10.2.10) are untuned and run unmodified iperf3 and curl.
#
# Each lab run works on a copy of this file in its own directory
# (/run/sosappliance-lab/ID/sos.hcl) with the paths below moved there, so
# runs never share a key, a state database or a socket.

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
  prefixes = ["10.10.1.0/24", "fd10:10:0:1::/64"]
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
    # Only the controller (10.10.1.1, beside the bridges) reaches the
    # health port.
    health_allow = ["10.10.1.1"]
  }
}

site "b" {
  prefixes = ["10.10.2.0/24", "fd10:10:0:2::/64"]
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
    # Only the controller (10.10.1.1, beside the bridges) reaches the
    # health port.
    health_allow = ["10.10.1.1"]
  }
}

# No queue_length: the receiving agent sizes each session's window from
# the path it measures (delivery rate x RTT, grown while the session is
# window-limited) within limits.session_memory, so the lab's 200 ms round
# trip needs no hand-sized reorder window.
whitelist "iperf" {
  clients     = ["10.10.1.0/24"]
  server      = "10.10.2.10"
  server_port = 5201
  streams     = 64
  chunk_size  = 60000
}

whitelist "http" {
  clients     = ["10.10.1.0/24"]
  server      = "10.10.2.10"
  server_port = 8080
  streams     = 64
  chunk_size  = 60000
}

# The lab is dual-stack: the HTTP server over IPv6 (its own port, so that
# removing the IPv4 whitelist withdraws all steering of 8080).
whitelist "http6" {
  clients     = ["fd10:10:0:1::/64"]
  servers     = ["fd10:10:0:2::10"]
  server_port = 8081
  streams     = 64
  chunk_size  = 60000
}

# A data port range, as GridFTP servers set with GLOBUS_TCP_PORT_RANGE:
# one whitelist, three value/mask flows per switch direction, one nftables
# interval set at the agent.
whitelist "range" {
  clients      = ["10.10.1.0/24"]
  servers      = ["10.10.2.8/29"]
  server_ports = ["50000-50063"]
  streams      = 16
  chunk_size   = 60000
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
