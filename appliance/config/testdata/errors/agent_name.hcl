# An agent's name is its identity in the stripe handshake: at most 63 bytes.
controller {
  node   = "ctl"
  listen = "127.0.0.1:6653"
}
security {
  psk_file = "/etc/sosappliance/psk"
}
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "sw-a" {
    datapath_id = "00:00:00:00:00:00:00:01"
  }
  agent "agent-with-a-name-far-too-long-to-travel-in-a-stripe-handshake-hello" { # ERROR: is not a valid handshake identity
    node        = "n-a"
    switch      = "sw-a"
    switch_port = 2
    mac         = "02:00:00:00:01:02"
    address     = "10.1.0.2"
    interface   = "eth0"
  }
}
