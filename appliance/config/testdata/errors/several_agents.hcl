# Several agents per site: each needs its own port, MAC and address; a
# whitelist names agents of its own sites, and a site needs an agent.
controller {
  node = "ctl"
}
security {
  psk_file = "/etc/sosappliance/psk"
}
spread {
  mode = "hash" # ERROR: spread mode "hash" is neither
}
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "sw-a" {
    datapath_id = "00:00:00:00:00:00:00:01"
  }
  agent "a1" {
    node        = "n-a1"
    switch      = "sw-a"
    switch_port = 2
    mac         = "02:00:00:00:01:02"
    address     = "10.1.0.2"
    interface   = "eth0"
  }
  agent "a2" { # ERROR: Agents "a1" and "a2" share MAC # ERROR: Agents "a1" and "a2" share address
    node        = "n-a2"
    switch      = "sw-a"
    switch_port = 2 # ERROR: Two agents on switch "sw-a" port 2
    mac         = "02:00:00:00:01:02"
    address     = "10.1.0.2"
    interface   = "eth0"
  }
}
site "b" {
  prefixes = ["10.2.0.0/24"]
  switch "sw-b" {
    datapath_id = "00:00:00:00:00:00:00:02"
  }
  agent "b1" {
    node        = "n-b1"
    switch      = "sw-b"
    switch_port = 2
    mac       = "02:00:00:00:02:02"
    address   = "10.2.0.2"
    interface = "eth0"
  }
}
site "c" {
  prefixes = ["10.3.0.0/24"]
}
whitelist "foreign" {
  clients       = ["10.1.0.0/24"]
  server        = "10.2.0.10"
  server_port   = 5201
  client_agents = ["a1", "a2"]
  server_agents = ["a1"] # ERROR: server_agents "a1" is not an agent of site "b"
}
whitelist "twice" {
  clients       = ["10.1.0.0/25"]
  server        = "10.2.0.11"
  server_port   = 5201
  client_agents = ["a2", "a2"] # ERROR: client_agents names agent "a2" twice
}
whitelist "both" {
  clients       = ["10.1.0.128/25"]
  server        = "10.2.0.12"
  server_port   = 5201
  client_agent  = "a1"
  client_agents = ["a1"] # ERROR: sets both client_agent and client_agents
}
whitelist "empty" { # ERROR: Site "c" has no agent to carry whitelist "empty"
  clients     = ["10.2.0.0/24"]
  server      = "10.3.0.10"
  server_port = 5201
}
site "d" {
  prefixes = ["10.4.0.0/24"]
  switch "sw-d1" {
    datapath_id = "00:00:00:00:00:00:00:04"
    port_masks  = false
  }
  switch "sw-d2" {
    datapath_id = "00:00:00:00:00:00:00:05"
  }
  agent "d1" {
    node        = "n-d1"
    switch      = "sw-d1"
    switch_port = 2
    mac         = "02:00:00:00:04:01"
    address     = "10.4.0.2"
    interface   = "eth0"
  }
  agent "d2" {
    node        = "n-d2"
    switch      = "sw-d2"
    switch_port = 2
    mac         = "02:00:00:00:04:02"
    address     = "10.4.0.3"
    interface   = "eth0"
  }
}
whitelist "split" { # ERROR: spreads over agents "d1" and "d2" on different switches # ERROR: spreads by TCP port, but switch "sw-d1" has no masked port matches
  clients     = ["10.4.0.0/24"]
  server      = "10.2.0.20"
  server_port = 5201
}
