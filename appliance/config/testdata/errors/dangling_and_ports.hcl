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
  agent "ag-1" {
    node        = "n1"
    switch      = "sw-a"
    switch_port = 3
    mac         = "02:00:00:00:00:01"
    address     = "10.1.0.2"
    interface   = "eth1"
    tuning      = ["wan-10gg"] # ERROR: refers to unknown tuning "wan-10gg"
  }
  agent "ag-2" {
    node        = "n2"
    switch      = "sw-a"
    switch_port = 3 # ERROR: Two agents on switch "sw-a" port 3
    mac         = "02:00:00:00:00:02"
    address     = "10.1.0.3"
    interface   = "eth1"
  }
  agent "ag-3" {
    node        = "n3"
    switch      = "sw-c" # ERROR: refers to unknown switch "sw-c"
    switch_port = 4
    mac         = "02:00:00:00:00:03"
    address     = "10.1.0.4"
    interface   = "eth1"
  }
}
tuning "wan-10g" {
  relay_cpus = "1"
}
node "ctl" {
  tuning = ["missing"] # ERROR: refers to unknown tuning "missing"
}
site "b" {
  prefixes = ["10.2.0.0/24"]
  switch "sw-b" {
    datapath_id = "00:00:00:00:00:00:00:02"
  }
  agent "ag-4" { # ERROR: Node "n1" runs two agents
    node        = "n1"
    switch      = "sw-a" # ERROR: uses switch "sw-a" of another site
    switch_port = 1
    mac         = "02:00:00:00:00:04"
    address     = "10.2.0.4"
    interface   = "eth1"
  }
}
