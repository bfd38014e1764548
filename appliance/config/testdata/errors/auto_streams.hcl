controller {
  node = "ctl"
}
security {
  psk_file = "/etc/sosappliance/psk"
}
limits {
  max_streams = 128
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
whitelist "auto-ok" {
  clients     = ["10.1.0.0/24"]
  server      = "10.2.0.10"
  server_port = 5201
  streams     = "auto"
  max_streams = 32
}
whitelist "many" {
  clients     = ["10.1.0.0/24"]
  server      = "10.2.0.11"
  server_port = 5201
  streams     = "many" # ERROR: streams must be a number or "auto", not "many"
}
whitelist "fixed-max" {
  clients     = ["10.1.0.0/24"]
  server      = "10.2.0.12"
  server_port = 5201
  streams     = 16
  max_streams = 32 # ERROR: sets max_streams without streams = "auto"
}
whitelist "auto-beyond" {
  clients     = ["10.1.0.0/24"]
  server      = "10.2.0.13"
  server_port = 5201
  streams     = "auto"
  max_streams = 256 # ERROR: lets a session open up to 256 streams, more than limits.max_streams 128
}
whitelist "auto-zero" {
  clients     = ["10.1.0.0/24"]
  server      = "10.2.0.14"
  server_port = 5201
  streams     = "auto"
  max_streams = 0 # ERROR: max_streams must be between 1 and 65536
}
