controller {
  node = "ctl"
  tls { # ERROR: Missing required argument
    cert_file = "controller-cert.pem" # ERROR: tls cert_file must be an absolute path
    key_file  = "/etc/sosappliance/controller-privkey.pem"
  }
  tls { # ERROR: Duplicate tls block
    cert_file = "/a"
    key_file  = "/b"
    ca_file   = "/c"
  }
}
security {
  psk_file = "/etc/sosappliance/psk"
}
site "a" {
  prefixes = ["10.1.0.0/24"]
  switch "sw-a" {
    datapath_id = "00:00:00:00:00:00:00:01"
    allow       = ["10.1.0.5/24"] # ERROR: has host bits set
  }
  switch "sw-b" {
    datapath_id = "00:00:00:00:00:00:00:02"
    connect     = "tcp:10.1.0.6:6653"
    tls         = true # ERROR: tls is for switches that connect to the controller
    allow       = ["10.1.0.6/32"] # ERROR: allow is for switches that connect to the controller
  }
  switch "sw-c" {
    datapath_id = "00:00:00:00:00:00:00:03"
    allow       = [] # ERROR: allow is empty
    tls         = "yes" # ERROR: tls must be true or false
  }
}
