controller {
  node = "ctl"
}
security {
  psk_file = "/etc/sosappliance/psk"
}
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "sw-a" {
    datapath_id = "00:00:00:00:00:00:00:01"
  }
  agent "ag-a" {
    node        = "na"
    switch      = "sw-a"
    switch_port = 3
    mac         = "02:00:00:00:00:01"
    address     = "10.1.0.2"
    interface   = "eth1"
  }
}
site "b" {
  prefixes = ["10.2.0.0/24"]
  switch "sw-b" {
    datapath_id = "00:00:00:00:00:00:00:02"
    port_masks  = false
  }
  agent "ag-b" {
    node        = "nb"
    switch      = "sw-b"
    switch_port = 3
    mac         = "02:00:00:00:00:02"
    address     = "10.2.0.2"
    interface   = "eth1"
  }
}
site "c" {
  prefixes = ["10.3.0.0/24"]
  agent "ag-c" {
    node        = "nc"
    switch      = "sw-a" # ERROR: uses switch "sw-a" of another site
    switch_port = 4
    mac         = "02:00:00:00:00:03"
    address     = "10.3.0.2"
    interface   = "eth1"
  }
}
whitelist "gridftp" {
  clients      = ["10.1.0.0/25"]
  servers      = ["10.2.0.16/28"]
  server_ports = ["2811", "50000-51000"]
  streams      = 2
}
whitelist "gridftp-again" {
  clients      = ["10.1.0.0/24"] # ERROR: Whitelist "gridftp-again" overlaps whitelist "gridftp"
  servers      = ["10.2.0.20"]
  server_ports = ["50500-50600"]
  streams      = 2
}
whitelist "reversed" {
  clients      = ["10.1.0.128/25"]
  servers      = ["10.2.0.64/28"]
  server_ports = ["51000-50000", "0", "70000", "6000-6100", "6050"] # ERROR: is reversed (empty); did you mean 50000-51000? # ERROR: includes port 0 # ERROR: "70000" goes past 65535 # ERROR: 6050 overlaps 6000-6100
  streams      = 2
}
whitelist "empty" {
  clients      = ["10.1.0.128/25"]
  server       = "10.2.0.99"
  server_ports = [] # ERROR: server_ports is empty
  streams      = 2
}
whitelist "both-forms" {
  clients      = ["10.1.0.128/25"]
  server       = "10.2.0.98"
  servers      = ["10.2.0.97"] # ERROR: has both server and servers
  server_port  = 22
  server_ports = ["22"] # ERROR: has both server_port and server_ports
  streams      = 2
}
whitelist "no-server" { # ERROR: names no server
  clients     = ["10.1.0.128/25"]
  server_port = 23
  streams     = 2
}
whitelist "two-sites" {
  clients     = ["10.1.0.128/25"]
  servers     = ["10.2.0.128/26", "10.3.0.0/24", "192.168.1.0/24"] # ERROR: has servers in two sites # ERROR: server 192.168.1.0/24 is in no site
  server_port = 24
  streams     = 2
}
whitelist "too-wide" {
  clients      = ["10.1.0.128/26"]
  servers      = ["10.2.0.200"]
  server_ports = ["1024-65535"] # ERROR: compiles to 64512 flows on switch "sw-b", more than 4096
  streams      = 2
}
whitelist "sideways" {
  clients     = ["10.1.0.192/26"]
  servers     = ["10.2.0.201"]
  server_port = 25
  direction   = "sideways" # ERROR: direction must be "client" or "both"
  streams     = 2
}
whitelist "every-port" { # ERROR: lists no ports # ERROR: compiles to 65535 flows
  clients = ["10.1.0.192/26"]
  servers = ["10.2.0.202"]
  streams = 2
}
whitelist "download" {
  clients      = ["10.2.0.16/28"] # ERROR: Whitelist "download" overlaps whitelist "gridftp": servers (direction both)
  servers      = ["10.1.0.10"]
  server_ports = ["50010"]
  direction    = "both"
  streams      = 2
}
whitelist "mixed" {
  clients     = ["10.1.0.192/26"]
  servers     = ["2001:db8:2::10"] # ERROR: mixes address families: client 10.1.0.192/26 and server 2001:db8:2::10
  server_port = 26
  streams     = 2
}
