controller {
  node = "ctl"
}
security {
  psk_file = "/etc/sosappliance/psk"
}
limits {
  session_memory = "8MB"
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
whitelist "one" {
  clients     = ["10.1.0.0/24"]
  server      = "10.2.0.10"
  server_port = 5201
  streams     = 2
}
whitelist "two" {
  clients     = ["10.1.0.128/25"] # ERROR: Whitelist "two" overlaps whitelist "one"
  server      = "10.2.0.10"
  server_port = 5201
  streams     = 2
}
whitelist "local" {
  clients     = ["10.1.0.0/24"]
  server      = "10.1.0.50" # ERROR: clients and server in the same site
  server_port = 22
  streams     = 2
}
whitelist "hungry" {
  clients      = ["10.1.0.0/24"]
  server       = "10.2.0.11"
  server_port  = 5201
  streams      = 64 # ERROR: needs more memory per session than the cap allows
  chunk_size   = 60000
  queue_length = 5
}
whitelist "nowhere" {
  clients     = ["192.168.0.0/16"] # ERROR: are in no site
  server      = "10.2.0.12"
  server_port = 5201
  streams     = 2
}
